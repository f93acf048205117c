//! Wire adapters, one module per `model.api`, and what they share: the HTTP client, SSE
//! framing (`sse-parse`, linear in the bytes received), the provider timeouts
//! (`retry.provider.timeoutMs`), keep-alive data lines, and cancellation.

pub mod anthropic_messages;
mod end;
pub(crate) mod lenient;
pub mod openai_completions;
pub mod openai_responses;
mod prefix;
pub mod scripted;
pub mod strict;

use std::sync::OnceLock;
use std::time::Duration;

use bytes::Bytes;
use futures::stream::BoxStream;
use futures::StreamExt;
use serde_json::Value;
pub use sse_parse::Event;
use tokio_util::sync::CancellationToken;

use crate::errors::ProviderError;
use crate::models::{Api, Model};
use crate::stream::{AssistantStream, MessageBuilder, StreamSender};
use crate::types::Context;

/// pi-ai 1.6's `clampMaxTokensToContext` (`api/simple-options.js`) as the room it leaves: the
/// window less the input and a margin of max(4,096, 15 % of the input); when that leaves under
/// 32,768 tokens, the window less the input and 4,096, at most 32,768; at least 1. The request
/// asks for the smaller of this and its own limit ([`StreamOptions::output_room`]). `window`,
/// `input` and the result are tokens.
pub fn pi_output_limit(window: u64, input: u64) -> u64 {
    const SAFETY: u64 = 4_096;
    const MIN_OUTPUT_WITH_RATIO_MARGIN: u64 = 32_768;
    let margin = SAFETY.max((input * 15).div_ceil(100)) as i64;
    let (window, input) = (window as i64, input as i64);
    let mut room = window - input - margin;
    if room < MIN_OUTPUT_WITH_RATIO_MARGIN as i64 {
        room = (MIN_OUTPUT_WITH_RATIO_MARGIN as i64).min(window - input - SAFETY as i64);
    }
    room.max(1) as u64
}

/// Per-request options.
#[derive(Debug, Clone, Default)]
pub struct StreamOptions {
    /// Cancelling ends the stream promptly with `stopReason: "aborted"` and drops the body.
    pub cancel: CancellationToken,
    /// The session the request belongs to (Pi's `sessionId`): an `openai-responses` request
    /// sends it as `prompt_cache_key` and in the session headers
    /// ([`openai_responses::session_headers`]). `None`: not sent.
    pub session_id: Option<std::sync::Arc<str>>,
    /// Overrides the model's output limit, in tokens.
    pub max_tokens: Option<u64>,
    /// The room the context window leaves for the answer, in tokens: the request never asks
    /// for more output than this (a thinking budget included), whatever `max_tokens` or the
    /// model's limit say (case 18.10). `None`: no cap beyond the model's.
    pub output_room: Option<u64>,
    /// `retry.provider.timeoutMs`: the longest wait for the connection and the response
    /// headers, and the longest gap between two reads of the body. `None`: the defaults
    /// [`DEFAULT_FIRST_BYTE_TIMEOUT`] and [`DEFAULT_IDLE_TIMEOUT`]. Either wait running out is
    /// a retryable [`ProviderError::Network`] error.
    pub timeout: Option<Duration>,
    /// The conversation's [`openai_completions::RequestCache`]: an `openai-completions`,
    /// `anthropic-messages` or `openai-responses` request reuses the serialised messages the
    /// previous request of the same conversation shares with it, and its tool list when
    /// unchanged (the bytes sent are the same). `None`: built whole.
    pub request_cache: Option<std::sync::Arc<openai_completions::RequestCache>>,
    /// How many leading messages of the context the caller vouches are, message for message,
    /// the ones it gave the earlier requests made with the same `request_cache` (nothing but
    /// appends since): an `openai-completions` request takes that much of the cached history
    /// as shared without comparing it again. 0 (the default): everything is compared.
    pub history_kept: usize,
    /// A number naming `context.tools` as given ([`next_tools_generation`]): the caller gives
    /// the same non-zero number only with the same specs, so a request cache that holds the
    /// tool list of a request with this number reuses its bytes without comparing the specs
    /// (each a JSON schema) with the previous request's. 0 (the default): compared.
    pub tools_generation: u64,
    /// How long the provider should keep the request's prompt cached (Pi's
    /// `options.cacheRetention`). `None`: as `PI_CACHE_RETENTION` says
    /// ([`CacheRetention::from_env`]); summary requests give [`CacheRetention::None`], as Pi
    /// 1.6's `completeSummarization` does. Read by every wire's request builder
    /// ([`StreamOptions::cache_retention`]).
    pub cache_retention: Option<CacheRetention>,
}

/// Pi's `CacheRetention`: the prompt caching a request asks for. What each wire sends for it:
/// `anthropic-messages` `cache_control` marks (none for [`CacheRetention::None`], a 1 h `ttl`
/// for [`CacheRetention::Long`] unless `compat.supportsLongCacheRetention` is false);
/// `openai-responses` `prompt_cache_key` and the session headers (none for `None`),
/// `prompt_cache_retention: "24h"` for `Long`; `openai-completions` the same key, retention and
/// headers where its compat asks for them and Anthropic-format `cache_control` with
/// `compat.cacheControlFormat: "anthropic"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheRetention {
    /// No prompt caching: no cache marks, no cache key, no session headers.
    None,
    /// The provider's default cache lifetime (Anthropic: 5 minutes).
    Short,
    /// The long lifetime where the provider has one (Anthropic 1 h, OpenAI 24 h).
    Long,
}

impl CacheRetention {
    /// The retention of a request that names none, as Pi 1.6's `resolveCacheRetention` reads
    /// the environment (each wire's own copy of it, the same rule): `PI_CACHE_RETENTION=long`
    /// → [`CacheRetention::Long`], anything else (unset, `short`, `none`, …) →
    /// [`CacheRetention::Short`]. Pi 1.6.0 reads no other value there (its docs: "Set to
    /// `long` for extended provider prompt caching"), so `PI_CACHE_RETENTION=none` turns no
    /// caching off.
    ///
    /// Read once per process (every request asks; the environment does not change under it).
    pub fn from_env() -> CacheRetention {
        static FROM_ENV: OnceLock<CacheRetention> = OnceLock::new();
        *FROM_ENV.get_or_init(|| {
            if std::env::var("PI_CACHE_RETENTION").as_deref() == Ok("long") {
                CacheRetention::Long
            } else {
                CacheRetention::Short
            }
        })
    }
}

/// A new [`StreamOptions::tools_generation`], never given before in this process (never 0).
pub fn next_tools_generation() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

impl StreamOptions {
    /// The request's cache retention: [`StreamOptions::cache_retention`] when given, else
    /// [`CacheRetention::from_env`].
    pub fn cache_retention(&self) -> CacheRetention {
        self.cache_retention
            .unwrap_or_else(CacheRetention::from_env)
    }

    /// The output limit to request: `max_tokens`, else the model's default
    /// ([`Model::default_max_tokens`]), at most [`StreamOptions::output_room`].
    pub fn output_tokens(&self, model: &Model) -> u64 {
        let base = self
            .max_tokens
            .unwrap_or_else(|| model.default_max_tokens());
        match self.output_room {
            Some(room) => base.min(room),
            None => base,
        }
    }
}

/// Longest wait for a response's headers (connection included) when no
/// `retry.provider.timeoutMs` is set: 10 minutes, the OpenAI SDK's default request timeout
/// (a local server may process a long prompt before it answers).
pub const DEFAULT_FIRST_BYTE_TIMEOUT: Duration = Duration::from_secs(600);

/// Longest silence between two reads of a streaming body when no `retry.provider.timeoutMs` is
/// set: 5 minutes. Providers send events (or SSE comments as keep-alives) far more often.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(300);

/// Largest SSE event accepted, in bytes (its data lines together): 256 MiB. A larger one ends
/// the stream with a [`ProviderError::Parse`] error instead of growing the buffer further.
pub const MAX_SSE_EVENT: usize = 256 * 1024 * 1024;

/// Starts one model response for `context` on `model` and returns its event stream at once.
/// Never fails: every failure arrives as the stream's terminal `error` event.
pub fn stream(model: &Model, context: &Context, options: StreamOptions) -> AssistantStream {
    let (tx, stream) = AssistantStream::channel();
    let model = model.clone();
    let of = (&model, context, &options);
    let (body, headers) = match model.api {
        Api::AnthropicMessages => (
            body_of(
                anthropic_messages::request_bytes,
                anthropic_messages::build_request,
                of,
            ),
            {
                let mut headers = anthropic_messages::request_headers(&model, context);
                headers.extend(anthropic_messages::session_headers(&model, &options));
                headers
            },
        ),
        Api::OpenaiCompletions => (
            body_of(
                openai_completions::request_bytes,
                openai_completions::build_request,
                of,
            ),
            openai_completions::session_headers(&model, &options),
        ),
        Api::OpenaiResponses => {
            // No session headers for a request without prompt caching (Pi 1.6's
            // `cacheSessionId`: summary requests).
            let session_id = options
                .session_id
                .as_deref()
                .filter(|_| options.cache_retention() != CacheRetention::None);
            (
                body_of(
                    openai_responses::request_bytes,
                    openai_responses::build_request,
                    of,
                ),
                openai_responses::request_headers(&model, session_id),
            )
        }
        Api::Scripted => {
            let turn = scripted::response_index(context);
            tokio::spawn(scripted::run(model, turn, tx, options.cancel));
            return stream;
        }
    };
    let StreamOptions {
        cancel,
        timeout,
        request_cache,
        ..
    } = options;
    tokio::spawn(async move {
        let api = model.api;
        answer(tx, &model, async |b| {
            let request = Request {
                model: &model,
                body,
                headers: &headers,
                cancel: &cancel,
                timeout,
                endpoint: request_cache.as_deref().map(|c| &c.url),
            };
            match api {
                Api::AnthropicMessages => anthropic_messages::stream_body(request, b).await,
                Api::OpenaiCompletions => openai_completions::stream_body(request, b).await,
                // (A scripted model's answer was started above.)
                Api::OpenaiResponses | Api::Scripted => {
                    openai_responses::stream_body(request, b).await
                }
            }
        })
        .await
    });
    stream
}

/// A wire's `request_bytes`: its request body through the conversation's request cache;
/// `Err` when the cache cannot serialise it.
type RequestBytes = fn(
    &Model,
    &Context,
    &StreamOptions,
    &openai_completions::RequestCache,
) -> Result<Vec<u8>, serde_json::Error>;

/// A wire's request body: through the conversation's request cache when the options carry one
/// (`request_bytes`: its bytes up to the first change reused), else — also when the cache
/// cannot serialise it — the whole request (`build_request`) serialised.
fn body_of(
    request_bytes: RequestBytes,
    build_request: fn(&Model, &Context, &StreamOptions) -> Value,
    (model, context, options): (&Model, &Context, &StreamOptions),
) -> Vec<u8> {
    options
        .request_cache
        .as_deref()
        .and_then(|cache| request_bytes(model, context, options, cache).ok())
        .unwrap_or_else(|| json_bytes(&build_request(model, context, options)))
}

/// One request as a wire's reading gets it: the model, the body, the request's own headers
/// (beside the model's), the cancellation, the provider timeout, and the conversation's parsed
/// model endpoint ([`UrlSlot`]; `None`: parsed by reqwest for this request).
struct Request<'a> {
    model: &'a Model,
    body: Vec<u8>,
    headers: &'a [(String, String)],
    cancel: &'a CancellationToken,
    timeout: Option<Duration>,
    endpoint: Option<&'a UrlSlot>,
}

/// [`Request`]'s fields, in their order.
type RequestParts<'a> = (
    &'a Model,
    Vec<u8>,
    &'a [(String, String)],
    &'a CancellationToken,
    Option<Duration>,
    Option<&'a UrlSlot>,
);

impl<'a> Request<'a> {
    /// Its fields, in their order (model, body, headers, cancel, timeout, endpoint).
    fn parts(self) -> RequestParts<'a> {
        let Request {
            model,
            body,
            headers,
            cancel,
            timeout,
            endpoint,
        } = self;
        (model, body, headers, cancel, timeout, endpoint)
    }
}

/// The shared HTTP client for `url`: one with rustls (ring provider, the platform's roots,
/// HTTP/2 when offered) for `https://`, and for `http://` (a local model server) one that
/// never loads the system's certificate store (reading it costs milliseconds, on the first
/// request's path). A redirect from `http://` to `https://` is refused with an error saying
/// so (the plain client has no roots to check the certificate against).
pub(crate) fn http_client(url: &str) -> &'static reqwest::Client {
    static TLS: OnceLock<reqwest::Client> = OnceLock::new();
    static PLAIN: OnceLock<reqwest::Client> = OnceLock::new();
    // Once per process (building the provider, to be refused, at every request was work
    // for nothing); installing twice is harmless, the first provider wins.
    static PROVIDER: std::sync::Once = std::sync::Once::new();
    PROVIDER.call_once(|| {
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
    let plain = url
        .get(..7)
        .is_some_and(|s| s.eq_ignore_ascii_case("http://"));
    if plain {
        PLAIN.get_or_init(|| {
            reqwest::Client::builder()
                .connect_timeout(Duration::from_secs(30))
                .tls_certs_only([])
                .redirect(reqwest::redirect::Policy::custom(|attempt| {
                    if attempt.url().scheme() == "https" {
                        attempt.error(
                            "an http:// baseUrl was redirected to https://: use the https:// URL as the model's baseUrl",
                        )
                    } else if attempt.previous().len() >= 10 {
                        attempt.error("too many redirects")
                    } else {
                        attempt.follow()
                    }
                }))
                .build()
                .unwrap_or_else(|_| reqwest::Client::new())
        })
    } else {
        TLS.get_or_init(|| {
            reqwest::Client::builder()
                .connect_timeout(Duration::from_secs(30))
                .build()
                .unwrap_or_else(|_| reqwest::Client::new())
        })
    }
}

/// A model's endpoint parsed (`reqwest::Url`) once and kept for the next request to it: the URL
/// is the same at every request of a conversation's model, so a request clones the parsed URL
/// instead of reqwest parsing the text again (`IntoUrl` for a `&str`). One slot per
/// conversation, next to its request bytes ([`openai_completions::RequestCache::url`]): the
/// run's model's URL; another URL (a model set between runs uses a new cache anyway) replaces
/// it. A parsed `Url` goes through the same checks in reqwest as the text would (`IntoUrl` for
/// `Url`: a URL without a host is refused).
#[derive(Debug, Default)]
pub struct UrlSlot(std::sync::Mutex<Option<(Box<str>, reqwest::Url)>>);

impl UrlSlot {
    /// `url` parsed: the kept parse when it is the slot's text, else parsed now and kept.
    /// `None`: the text does not parse; the caller hands reqwest the text, whose own error then
    /// says so.
    pub(crate) fn parsed(&self, url: &str) -> Option<reqwest::Url> {
        let mut slot = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some((text, parsed)) = slot.as_ref() {
            if **text == *url {
                return Some(parsed.clone());
            }
        }
        let parsed = reqwest::Url::parse(url).ok()?;
        *slot = Some((url.into(), parsed.clone()));
        Some(parsed)
    }
}

/// A tool result's text on the OpenAI wires, as Pi 1.6 sends it (openai-completions'
/// `convertMessages`, openai-responses-shared's `convertToolResultOutput`): its text blocks
/// joined with newlines when they hold more than whitespace, else `(see attached image)` when
/// it holds an image, else `(no tool output)` (an empty file read, a command without output).
pub(crate) fn tool_result_text(content: &[crate::types::ContentBlock]) -> String {
    let text = crate::types::join_text(content);
    if !text.trim().is_empty() {
        text
    } else if content
        .iter()
        .any(|b| matches!(b, crate::types::ContentBlock::Image(_)))
    {
        "(see attached image)".to_string()
    } else {
        "(no tool output)".to_string()
    }
}

/// Joins a base URL and a path without doubling or dropping the `/`.
pub(crate) fn join_url(base: &str, path: &str) -> String {
    format!(
        "{}/{}",
        base.trim_end_matches('/'),
        path.trim_start_matches('/')
    )
}

/// An open SSE body: the HTTP body read chunk by chunk into an incremental SSE parser.
///
/// Framing (CR / LF / CRLF line ends, `data:` with or without a space, multi-line data joined
/// with `\n`, `:` comment lines, UTF-8 sequences split across reads) is `sse-parse`'s, which
/// scans every byte once whatever the chunking: one 50 MB line costs its length, not its
/// square, and the buffers go with the body. An event not closed by a blank line when the body
/// ends is dropped (WHATWG "interpreting an event stream"), so a cut stream never yields half
/// an event.
pub(crate) struct SseBody {
    body: BoxStream<'static, reqwest::Result<Bytes>>,
    parser: sse_parse::SseParser,
    ended: bool,
    idle: Duration,
    /// The body's last four bytes (zeros before the first), for [`SseBody::ended_cleanly`].
    tail: [u8; 4],
    /// Bytes arrived.
    fed: bool,
    /// Whether the body's first byte other than whitespace has been seen.
    sniffed: bool,
    /// The body when it is a document, not an event stream: its first byte other than
    /// whitespace is `{`, `[` or `<` (a JSON document or an HTML page, which no event stream
    /// starts with; a gateway's `{"error": …}` answered with status 200). Kept up to
    /// [`MAX_DOCUMENT`] bytes and read to its end, then [`document_error`].
    document: Option<Vec<u8>>,
    /// The last read of the body, handed to the parser [`FEED`] bytes at a time from `at` on.
    pending: Bytes,
    at: usize,
}

/// How many bytes of a read the SSE parser is given at once: the events of one piece are
/// taken before the next is fed. A read can hold a whole answer (the bench's 4,500 chunks came
/// in three reads of 200 KB): fed whole, every one of its events was built and queued before
/// the first was read, and their buffers, all alive at once, missed the allocator's caches
/// (callgrind: about 290 instructions more per event). The events and their order are the
/// same for any feeding (`sse-parse`: chunk boundaries never change the output).
const FEED: usize = 8 * 1024;

/// How much of a body that is not an event stream is kept for its error ([`document_error`]).
const MAX_DOCUMENT: usize = 64 * 1024;

impl SseBody {
    pub(crate) fn new(body: BoxStream<'static, reqwest::Result<Bytes>>, idle: Duration) -> Self {
        SseBody {
            body,
            parser: sse_parse::SseParser::new().max_buffer(MAX_SSE_EVENT),
            ended: false,
            idle,
            tail: [0; 4],
            fed: false,
            sniffed: false,
            document: None,
            pending: Bytes::new(),
            at: 0,
        }
    }

    /// True when the body ended at an event boundary: nothing arrived, or its last line is the
    /// blank line that closes an event (`\n\n`, `\r\n\r\n`, `\r\r`, …). A body that ends
    /// inside an event (its last event dropped unread) was cut. Read at the end of the body.
    pub(crate) fn ended_cleanly(&self) -> bool {
        if !self.fed {
            return true;
        }
        let t = &self.tail;
        // The last line's terminator, then the one before it: the last line is empty.
        let before = if t[2..] == *b"\r\n" {
            t[1]
        } else if matches!(t[3], b'\n' | b'\r') {
            t[2]
        } else {
            return false;
        };
        matches!(before, b'\n' | b'\r')
    }

    /// The next event already framed, if any: what [`SseBody::next`] returns first, taken
    /// without building and polling its future (the adapters' loops ask this first, then
    /// `next`: a read's piece frames dozens of events, each one a delta).
    #[inline]
    pub(crate) fn queued(&mut self) -> Option<Event> {
        self.parser.next_event()
    }

    /// The next event, `Ok(None)` at the end of the body; cancellation wins over a pending read.
    /// Before it waits for the body, `b`'s held delta is sent ([`MessageBuilder::flush`]): the
    /// deltas of the events one read brought go out together, and none waits for the next
    /// read. A body read failing, or silent for longer than the idle timeout, is a retryable
    /// [`ProviderError::Network`] error; an event over [`MAX_SSE_EVENT`] a
    /// [`ProviderError::Parse`] error; the consumer gone ([`crate::stream::Closed`])
    /// [`ProviderError::Aborted`].
    pub(crate) async fn next(
        &mut self,
        cancel: &CancellationToken,
        b: &mut MessageBuilder,
    ) -> Result<Option<Event>, ProviderError> {
        loop {
            if let Some(ev) = self.parser.next_event() {
                return Ok(Some(ev));
            }
            if self.at < self.pending.len() {
                let end = self.pending.len().min(self.at + FEED);
                self.parser.feed(&self.pending[self.at..end]);
                self.at = end;
                if self.parser.overflows() > 0 {
                    return Err(ProviderError::Parse {
                        message: format!("an SSE event exceeds the {MAX_SSE_EVENT}-byte limit"),
                    });
                }
                continue;
            }
            if self.ended {
                return Ok(None);
            }
            if b.flush().await.is_err() {
                return Err(ProviderError::Aborted);
            }
            let read = tokio::select! {
                biased;
                _ = cancel.cancelled() => return Err(ProviderError::Aborted),
                r = tokio::time::timeout(self.idle, self.body.next()) => r,
            };
            match read {
                Err(_) => {
                    return Err(ProviderError::Network {
                        message: format!(
                            "provider timed out: no data for {} (retry.provider.timeoutMs)",
                            seconds(self.idle)
                        ),
                    })
                }
                Ok(Some(Ok(chunk))) => {
                    if !chunk.is_empty() {
                        let n = chunk.len().min(4);
                        self.tail.rotate_left(n);
                        self.tail[4 - n..].copy_from_slice(&chunk[chunk.len() - n..]);
                        self.fed = true;
                    }
                    if !self.sniffed {
                        if let Some(at) = chunk.iter().position(|c| !c.is_ascii_whitespace()) {
                            self.sniffed = true;
                            if matches!(chunk[at], b'{' | b'[' | b'<') {
                                self.document = Some(Vec::new());
                            }
                        }
                    }
                    if let Some(doc) = &mut self.document {
                        let room = MAX_DOCUMENT.saturating_sub(doc.len());
                        doc.extend_from_slice(&chunk[..chunk.len().min(room)]);
                        if doc.len() >= MAX_DOCUMENT {
                            return Err(document_error(doc));
                        }
                        continue;
                    }
                    self.pending = chunk;
                    self.at = 0;
                }
                Ok(Some(Err(e))) => {
                    return Err(ProviderError::Network {
                        message: crate::keys::redact(&format!(
                            "stream read failed: {}",
                            error_chain(&e)
                        )),
                    })
                }
                Ok(None) => {
                    if let Some(doc) = &self.document {
                        return Err(document_error(doc));
                    }
                    self.ended = true;
                    self.parser.finish();
                }
            }
        }
    }
}

/// The failure a 200 answer stands for whose body is a document, not an event stream
/// ([`SseBody`]'s `document`): the provider's error when the document is JSON naming one
/// (`{"error": {"message", "code" or "type"}}` or `{"error": "text"}`, classified as an error
/// inside a stream: [`crate::errors::classify_stream_error`], so an invalid key is an auth
/// error and an overloaded server is retried), else a [`ProviderError::Provider`] error
/// quoting the body (cut to 2,000 bytes; a non-streamed answer or a proxy's HTML page), not
/// retried. Before this a gateway's `{"error": …}` with status 200 was retried as "stream
/// ended without a response" and its message never shown.
fn document_error(doc: &[u8]) -> ProviderError {
    let text = String::from_utf8_lossy(doc);
    if let Ok(v) = serde_json::from_str::<Value>(text.trim()) {
        let err = &v["error"];
        if let Some(message) = err.as_str() {
            return crate::errors::classify_stream_error(None, message);
        }
        if err.is_object() {
            let message = err
                .get("message")
                .and_then(Value::as_str)
                .map(str::to_string)
                .unwrap_or_else(|| err.to_string());
            let kind = err
                .get("code")
                .and_then(Value::as_str)
                .or_else(|| err.get("type").and_then(Value::as_str));
            return crate::errors::classify_stream_error(kind, &message);
        }
    }
    ProviderError::Provider {
        message: format!(
            "HTTP 200 with a body that is not an event stream: {}",
            crate::errors::truncate_body(&crate::keys::redact(&text))
        ),
    }
}

/// A duration as the error texts say it: `1.5 s`, `600 s`.
fn seconds(d: Duration) -> String {
    if d.subsec_millis() == 0 {
        format!("{} s", d.as_secs())
    } else {
        format!("{:.1} s", d.as_secs_f64())
    }
}

/// One streamed answer, the same for every wire: the builder started on `tx` (the consumer
/// already gone: nothing read), the body read by `stream` into it, then the message finished
/// with the stop reason `stream` returns (`Ok(Some)`), failed with its error keeping the
/// partial content (`Err`), or dropped when the consumer went away while reading (`Ok(None)`).
async fn answer(
    tx: StreamSender,
    model: &Model,
    stream: impl AsyncFnOnce(
        &mut MessageBuilder,
    ) -> Result<Option<crate::types::StopReason>, ProviderError>,
) {
    let Ok(mut b) = MessageBuilder::start(tx, model).await else {
        return;
    };
    match stream(&mut b).await {
        Ok(Some(reason)) => {
            let _ = b.finish(reason).await;
        }
        Ok(None) => {}
        Err(failure) => {
            b.fail(failure).await;
        }
    }
}

/// POSTs `body` to `url` and returns the SSE body, or the classified failure: the HTTP
/// status, `Retry-After` and the provider's error body, worded as Pi words it on the wire
/// (`wording`; see [`crate::errors::classify_http_as`]);
/// secrets never appear (headers are not echoed). No headers within `timeout` (connection
/// included; default [`DEFAULT_FIRST_BYTE_TIMEOUT`]) is a retryable
/// [`ProviderError::Network`] error; so is a body silent for `timeout` (default
/// [`DEFAULT_IDLE_TIMEOUT`]) later.
/// `body` as sent: compact JSON. (A `Value` always serialises; were it ever not to, its
/// `Display` text is the same JSON.)
pub(crate) fn json_bytes(body: &Value) -> Vec<u8> {
    serde_json::to_vec(body).unwrap_or_else(|_| body.to_string().into_bytes())
}

/// `endpoint`: where the conversation keeps its model's URL parsed ([`UrlSlot`]); `None`: the
/// text is handed to reqwest.
pub(crate) async fn open_sse(
    wording: &crate::errors::HttpWording,
    url: &str,
    endpoint: Option<&UrlSlot>,
    headers: &[(String, String)],
    body: Vec<u8>,
    cancel: &CancellationToken,
    timeout: Option<Duration>,
) -> Result<SseBody, ProviderError> {
    let first_byte = timeout.unwrap_or(DEFAULT_FIRST_BYTE_TIMEOUT);
    let idle = timeout.unwrap_or(DEFAULT_IDLE_TIMEOUT);
    let client = http_client(url);
    let req = match endpoint.and_then(|e| e.parsed(url)) {
        Some(parsed) => client.post(parsed),
        None => client.post(url),
    };
    let mut req = req
        .header("content-type", "application/json")
        .header("accept", "text/event-stream");
    for (k, v) in headers {
        req = req.header(k.as_str(), v.as_str());
    }
    let req = req.body(body);
    let resp = tokio::select! {
        biased;
        // Pi 1.6 says `Request aborted` for a request aborted before any answer.
        _ = cancel.cancelled() => return Err(ProviderError::AbortedBeforeResponse),
        r = tokio::time::timeout(first_byte, req.send()) => match r {
            Err(_) => return Err(ProviderError::Network {
                message: format!(
                    "provider timed out: no response from {url} within {} (retry.provider.timeoutMs)",
                    seconds(first_byte)
                ),
            }),
            Ok(r) => r.map_err(|e| ProviderError::Network {
                message: crate::keys::redact(&send_error_words(url, &e)),
            })?,
        },
    };
    let status = resp.status();
    if !status.is_success() {
        let header = |name: &str| {
            resp.headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
        };
        let retry_after_ms = header("retry-after-ms");
        let retry_after = header("retry-after");
        let text = tokio::select! {
            biased;
            _ = cancel.cancelled() => return Err(ProviderError::Aborted),
            t = tokio::time::timeout(idle, resp.text()) => match t {
                Ok(t) => t.unwrap_or_default(),
                Err(_) => String::new(),
            },
        };
        return Err(crate::errors::classify_http_as(
            wording,
            status.as_u16(),
            retry_after_ms.as_deref(),
            retry_after.as_deref(),
            &text,
        ));
    }
    Ok(SseBody::new(resp.bytes_stream().boxed(), idle))
}

/// What one SSE event's `data` holds.
#[derive(Debug)]
pub(crate) enum Data {
    /// A JSON payload (the event proper).
    Json(Value),
    /// OpenAI's end marker `[DONE]`.
    Done,
    /// Nothing to read: empty data, or a gateway's keep-alive (data that is not JSON, such as
    /// `data: : keep-alive` or `data: PING`), logged at debug.
    Skip,
}

/// Reads one SSE event's `data`: a JSON object (lone UTF-16 surrogate escapes decoded lossily,
/// STRM-07 b), `[DONE]`, or nothing. Keep-alive lines a gateway puts in `data:` fields are
/// skipped: an event none of whose data lines starts a JSON object, and
/// non-JSON lines before the first or after the last line of a JSON payload in the same event.
/// Invalid JSON inside the payload itself is a [`ProviderError::Parse`] error naming the event.
pub(crate) fn read_data(event: &Event) -> Result<Data, ProviderError> {
    let data = event.data.trim();
    if data.is_empty() {
        return Ok(Data::Skip);
    }
    if data == "[DONE]" {
        return Ok(Data::Done);
    }
    // Every event of the three formats is a JSON object.
    if data.starts_with('{') {
        if let Ok(v) = crate::json::parse_lossy(data) {
            return Ok(Data::Json(v));
        }
    }
    // Where a JSON payload could start and end: the first line opening an object, the last
    // line closing one.
    let lines: Vec<&str> = data.split('\n').collect();
    let opens = |l: &&str| l.trim_start().starts_with('{');
    let closes = |l: &&str| l.trim_end().ends_with('}');
    let Some(start) = lines.iter().position(opens) else {
        tracing::debug!("skipping a non-JSON SSE data payload (keep-alive): {data:.80}");
        return Ok(Data::Skip);
    };
    // A JSON object was begun: from here on it has to parse.
    let end = lines
        .iter()
        .rposition(closes)
        .filter(|e| *e >= start)
        .unwrap_or(lines.len() - 1);
    let payload = lines[start..=end].join("\n");
    match crate::json::parse_lossy(&payload) {
        Ok(v) => {
            if start > 0 || end + 1 < lines.len() {
                tracing::debug!("skipped keep-alive lines around an SSE JSON payload");
            }
            Ok(Data::Json(v))
        }
        Err(e) => Err(ProviderError::Parse {
            message: format!("invalid JSON in {} event: {e}", event_name(event)),
        }),
    }
}

/// One SSE event's payload read as `T` (a borrowed reading of only the fields an adapter
/// reads, [`lenient`]): straight from the event's `data` when it is one JSON object that `T`
/// reads, else through [`read_data`] (keep-alive lines, lone surrogates, duplicated keys: the
/// `Value` reading, written out again into `spill` and read as `T` from there), so both ways
/// read the same. `Ok(None)`: `[DONE]`, `Err`: [`read_data`]'s error, or a `Value` `T`
/// cannot read (a [`ProviderError::Parse`] naming the event).
pub(crate) fn read_chunk<'a, T: serde::Deserialize<'a>>(
    event: &'a Event,
    spill: &'a mut String,
) -> Result<Option<Chunk<T>>, ProviderError> {
    // JSON's own whitespace (what serde skips around a value) before the object: no trim of
    // Unicode whitespace per event here; `read_data` trims for the other cases.
    let data = event.data.trim_ascii_start();
    if data.starts_with('{') {
        if let Ok(t) = serde_json::from_str::<T>(data) {
            return Ok(Some(Chunk::Read(t)));
        }
    }
    match read_data(event)? {
        Data::Done => Ok(None),
        Data::Skip => Ok(Some(Chunk::Skip)),
        Data::Json(v) => {
            *spill = v.to_string();
            match serde_json::from_str::<T>(spill) {
                Ok(t) => Ok(Some(Chunk::Read(t))),
                Err(e) => Err(ProviderError::Parse {
                    message: format!("unreadable {} event: {e}", event_name(event)),
                }),
            }
        }
    }
}

/// What [`read_chunk`] read of an event that is not the end marker.
#[derive(Debug)]
pub(crate) enum Chunk<T> {
    /// The payload, read.
    Read(T),
    /// Nothing to read (see [`Data::Skip`]).
    Skip,
}

fn event_name(event: &Event) -> &str {
    if event.event.is_empty() {
        "SSE"
    } else {
        &event.event
    }
}

/// A request that got no answer, in words a user reads (issue: "the model server refused the
/// connection at 127.0.0.1:PORT", not `os error 111`): refused, name not found (DNS), TLS
/// handshake, no answer in time, connection closed; anything else is `request to URL failed:`
/// and the error chain. Each names the model server's `host:port` and ends with the URL.
pub(crate) fn send_error_words(url: &str, e: &reqwest::Error) -> String {
    let parsed = reqwest::Url::parse(url).ok();
    let host = parsed
        .as_ref()
        .and_then(|u| u.host_str().map(str::to_string))
        .unwrap_or_else(|| url.to_string());
    let at = match parsed.as_ref().and_then(|u| u.port_or_known_default()) {
        Some(p) => format!("{host}:{p}"),
        None => host.clone(),
    };
    let chain = error_chain(e);
    let lower = chain.to_lowercase();
    let mut io_kind = None;
    let mut innermost = e.to_string();
    let mut src: Option<&dyn std::error::Error> = Some(e);
    while let Some(inner) = src {
        if let Some(io) = inner.downcast_ref::<std::io::Error>() {
            io_kind.get_or_insert(io.kind());
        }
        innermost = inner.to_string();
        src = inner.source();
    }
    // "Connection refused (os error 111)" → "Connection refused".
    let innermost = match innermost.rfind(" (os error ") {
        Some(i) if innermost.ends_with(')') => innermost[..i].to_string(),
        _ => innermost,
    };
    use std::io::ErrorKind as K;
    let words = if io_kind == Some(K::ConnectionRefused) || lower.contains("connection refused") {
        format!("the model server refused the connection at {at} (is it running?)")
    } else if lower.contains("dns error") || lower.contains("failed to lookup address") {
        format!("the model server's name {host} could not be resolved (DNS: {innermost})")
    } else if lower.contains("certificate") || lower.contains("tls") || lower.contains("handshake")
    {
        format!("the secure (TLS) connection to the model server at {at} failed: {innermost}")
    } else if e.is_timeout() || io_kind == Some(K::TimedOut) {
        format!("the model server at {at} did not answer in time")
    } else if matches!(
        io_kind,
        Some(K::ConnectionReset | K::ConnectionAborted | K::UnexpectedEof | K::BrokenPipe)
    ) || lower.contains("connection closed")
    {
        format!("the model server at {at} closed the connection")
    } else if e.is_connect() {
        format!("could not connect to the model server at {at}: {innermost}")
    } else {
        return format!("request to {url} failed: {chain}");
    };
    format!("{words} — request to {url} failed")
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(inner) = src {
        s.push_str(": ");
        s.push_str(&inner.to_string());
        src = inner.source();
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A conversation's endpoint is parsed once and kept in its slot: every later request to
    /// the same URL gets the kept parse (equal to a fresh one), another URL replaces it, text
    /// that does not parse is `None` and keeps nothing; each conversation has its own slot.
    #[test]
    fn an_endpoint_is_parsed_once_per_slot_and_equals_a_fresh_parse() {
        let (a, b) = (UrlSlot::default(), UrlSlot::default());
        let one = "http://127.0.0.1:40000/v1/chat/completions";
        let two = "HTTP://Example.COM/v1/messages";
        let kept = |s: &UrlSlot| s.0.lock().unwrap().as_ref().map(|(t, _)| t.to_string());
        assert_eq!(a.parsed(one), Some(reqwest::Url::parse(one).unwrap()));
        assert_eq!(a.parsed(one), Some(reqwest::Url::parse(one).unwrap()));
        assert_eq!((kept(&a), kept(&b)), (Some(one.to_string()), None));
        assert_eq!(
            a.parsed(two).map(String::from),
            Some("http://example.com/v1/messages".to_string())
        );
        assert_eq!(
            (a.parsed("not a url"), kept(&a)),
            (None, Some(two.to_string()))
        );
    }
}

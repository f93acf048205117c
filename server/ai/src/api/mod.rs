//! Wire adapters, one module per `model.api`, and what they share: the HTTP client, SSE
//! framing (`eventsource-stream`) and cancellation.

pub mod anthropic_messages;
pub mod openai_completions;
pub mod openai_responses;
pub mod scripted;

use std::sync::OnceLock;
use std::time::Duration;

use eventsource_stream::{Event, Eventsource};
use futures::stream::BoxStream;
use futures::StreamExt;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::errors::ProviderError;
use crate::models::Model;
use crate::stream::{AssistantStream, MessageBuilder};
use crate::types::Context;

/// Per-request options.
#[derive(Debug, Clone, Default)]
pub struct StreamOptions {
    /// Cancelling ends the stream promptly with `stopReason: "aborted"` and drops the body.
    pub cancel: CancellationToken,
    /// Overrides the model's output limit, in tokens.
    pub max_tokens: Option<u64>,
}

/// Starts one model response for `context` on `model` and returns its event stream at once.
/// Never fails: every failure arrives as the stream's terminal `error` event.
pub fn stream(model: &Model, context: &Context, options: StreamOptions) -> AssistantStream {
    let (tx, stream) = AssistantStream::channel();
    let model = model.clone();
    match model.api.as_str() {
        "anthropic-messages" => {
            let body = anthropic_messages::build_request(&model, context, &options);
            tokio::spawn(anthropic_messages::run(model, body, tx, options.cancel));
        }
        "openai-completions" => {
            let body = openai_completions::build_request(&model, context, &options);
            tokio::spawn(openai_completions::run(model, body, tx, options.cancel));
        }
        "openai-responses" => {
            let body = openai_responses::build_request(&model, context, &options);
            tokio::spawn(openai_responses::run(model, body, tx, options.cancel));
        }
        crate::models::SCRIPTED_API => {
            let turn = scripted::response_index(context);
            tokio::spawn(scripted::run(model, turn, tx, options.cancel));
        }
        other => {
            let other = other.to_string();
            tokio::spawn(async move {
                if let Ok(b) = MessageBuilder::start(tx, &model).await {
                    b.fail(ProviderError::Provider {
                        message: format!("unsupported api \"{other}\""),
                    })
                    .await;
                }
            });
        }
    }
    stream
}

/// The shared HTTP client (rustls with the ring provider, HTTP/2 when offered).
pub(crate) fn http_client() -> &'static reqwest::Client {
    static CLIENT: OnceLock<reqwest::Client> = OnceLock::new();
    CLIENT.get_or_init(|| {
        // Installing twice is harmless; the first provider wins.
        let _ = rustls::crypto::ring::default_provider().install_default();
        reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(30))
            .build()
            .unwrap_or_else(|_| reqwest::Client::new())
    })
}

/// Joins a base URL and a path without doubling or dropping the `/`.
pub(crate) fn join_url(base: &str, path: &str) -> String {
    format!(
        "{}/{}",
        base.trim_end_matches('/'),
        path.trim_start_matches('/')
    )
}

/// An open SSE body.
pub(crate) struct SseBody {
    events: BoxStream<'static, Result<Event, String>>,
}

impl SseBody {
    /// The next event, `Ok(None)` at the end of the body; cancellation wins over a pending read.
    /// SSE framing (CR / LF / CRLF line ends, `data:` with or without a space, multi-line data
    /// joined with `\n`, `:` comment lines) and UTF-8 sequences split across reads are handled
    /// by `eventsource-stream`.
    pub(crate) async fn next(
        &mut self,
        cancel: &CancellationToken,
    ) -> Result<Option<Event>, ProviderError> {
        tokio::select! {
            biased;
            _ = cancel.cancelled() => Err(ProviderError::Aborted),
            ev = self.events.next() => match ev {
                Some(Ok(ev)) => Ok(Some(ev)),
                Some(Err(e)) => Err(ProviderError::Network { message: crate::keys::redact(&e) }),
                None => Ok(None),
            },
        }
    }
}

/// POSTs `body` to `url` and returns the SSE body, or the classified failure: the HTTP
/// status, `Retry-After` and the provider's error body (see [`crate::errors::classify_http`]);
/// secrets never appear (headers are not echoed).
pub(crate) async fn open_sse(
    url: &str,
    headers: &[(String, String)],
    body: &Value,
    cancel: &CancellationToken,
) -> Result<SseBody, ProviderError> {
    let mut req = http_client()
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "text/event-stream");
    for (k, v) in headers {
        req = req.header(k.as_str(), v.as_str());
    }
    let req = req.body(body.to_string());
    let resp = tokio::select! {
        biased;
        _ = cancel.cancelled() => return Err(ProviderError::Aborted),
        r = req.send() => r.map_err(|e| ProviderError::Network {
            message: crate::keys::redact(&format!("request to {url} failed: {}", error_chain(&e))),
        })?,
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
            t = resp.text() => t.unwrap_or_default(),
        };
        return Err(crate::errors::classify_http(
            status.as_u16(),
            retry_after_ms.as_deref(),
            retry_after.as_deref(),
            &text,
        ));
    }
    let events = resp
        .bytes_stream()
        .eventsource()
        .map(|r| r.map_err(|e| format!("stream read failed: {e}")))
        .boxed();
    Ok(SseBody { events })
}

/// Parses one SSE `data` payload as JSON, tolerating lone UTF-16 surrogate escapes (STRM-07 b).
pub(crate) fn parse_data(event: &Event) -> Result<Value, ProviderError> {
    crate::json::parse_lossy(&event.data).map_err(|e| ProviderError::Parse {
        message: format!(
            "invalid JSON in {} event: {e}",
            if event.event.is_empty() {
                "SSE"
            } else {
                &event.event
            }
        ),
    })
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

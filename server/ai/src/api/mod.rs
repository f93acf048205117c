//! Wire adapters, one module per `model.api`, and what they share: the HTTP client, SSE
//! framing (`eventsource-stream`) and cancellation.

pub mod anthropic_messages;
pub mod openai_completions;
pub mod scripted;

use std::sync::OnceLock;
use std::time::Duration;

use eventsource_stream::{Event, Eventsource};
use futures::stream::BoxStream;
use futures::StreamExt;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::models::Model;
use crate::stream::{AssistantStream, MessageBuilder};
use crate::types::{Context, StopReason};

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
        crate::models::SCRIPTED_API => {
            let turn = scripted::response_index(context);
            tokio::spawn(scripted::run(model, turn, tx, options.cancel));
        }
        other => {
            let other = other.to_string();
            tokio::spawn(async move {
                if let Ok(b) =
                    MessageBuilder::start(tx, &model.api, &model.provider, &model.id).await
                {
                    b.fail(StopReason::Error, format!("unsupported api \"{other}\""))
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

/// How a request or its stream failed: the terminal stop reason and the error message.
pub(crate) struct Failure {
    reason: StopReason,
    message: String,
}

impl Failure {
    fn aborted() -> Failure {
        Failure {
            reason: StopReason::Aborted,
            message: "Request was aborted".into(),
        }
    }

    fn error(message: String) -> Failure {
        Failure {
            reason: StopReason::Error,
            message,
        }
    }

    /// Ends the stream with this failure, keeping what streamed so far.
    pub(crate) async fn end(self, b: MessageBuilder) {
        b.fail(self.reason, self.message).await;
    }
}

/// An open SSE body.
pub(crate) struct SseBody {
    events: BoxStream<'static, Result<Event, String>>,
}

impl SseBody {
    /// The next event, `Ok(None)` at the end of the body; cancellation wins over a pending read.
    pub(crate) async fn next(
        &mut self,
        cancel: &CancellationToken,
    ) -> Result<Option<Event>, Failure> {
        tokio::select! {
            biased;
            _ = cancel.cancelled() => Err(Failure::aborted()),
            ev = self.events.next() => match ev {
                Some(Ok(ev)) => Ok(Some(ev)),
                Some(Err(e)) => Err(Failure::error(e)),
                None => Ok(None),
            },
        }
    }
}

/// Longest error body kept in an error message, in bytes.
const MAX_ERROR_BODY: usize = 2_000;

/// POSTs `body` to `url` and returns the SSE body, or an error message naming the HTTP status
/// and the provider's error body (secrets never appear: headers are not echoed).
pub(crate) async fn open_sse(
    url: &str,
    headers: &[(String, String)],
    body: &Value,
    cancel: &CancellationToken,
) -> Result<SseBody, Failure> {
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
        _ = cancel.cancelled() => return Err(Failure::aborted()),
        r = req.send() => r.map_err(|e| Failure::error(format!("request to {url} failed: {}", error_chain(&e))))?,
    };
    let status = resp.status();
    if !status.is_success() {
        let text = tokio::select! {
            biased;
            _ = cancel.cancelled() => return Err(Failure::aborted()),
            t = resp.text() => t.unwrap_or_default(),
        };
        let mut text = text.trim().to_string();
        if text.len() > MAX_ERROR_BODY {
            let mut cut = MAX_ERROR_BODY;
            while !text.is_char_boundary(cut) {
                cut -= 1;
            }
            text.truncate(cut);
            text.push('…');
        }
        return Err(Failure::error(format!(
            "HTTP {}: {}",
            status.as_u16(),
            text
        )));
    }
    let events = resp
        .bytes_stream()
        .eventsource()
        .map(|r| r.map_err(|e| format!("stream read failed: {e}")))
        .boxed();
    Ok(SseBody { events })
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

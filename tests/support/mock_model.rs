//! The one loopback model of every suite. It answers `POST /v1/chat/completions`
//! (openai-completions), `POST /v1/messages` (anthropic-messages) and `POST /v1/responses`
//! (openai-responses) with real SSE streams,
//! one scripted [`Step`] per request, records every request, and records a pairing violation
//! (answering HTTP 400 like a real provider) when a request carries a tool call without its
//! paired result or a result without its call.
//!
//! The cargo tests run it in process ([`MockModel::start`]); the Neovim specs, the code-server
//! e2e and the benchmarks run the same engine as the `mock-model` binary (`tests/bin/mock_model.rs`)
//! on a JSON script ([`crate::mock_script`]): ordered steps, rules on the last user message
//! ([`MockModel::set_responder`]), paced streams ([`Answer`]), every request body logged as one
//! JSONL line ([`MockModel::log_requests`]).

use std::io::Write;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use axum::routing::post;
use axum::serve::ListenerExt;
use axum::Router;
use serde_json::{json, Value};

/// One scripted response.
#[derive(Debug, Clone)]
pub enum Step {
    /// Stream this text and stop.
    Text(String),
    /// Optional text, then these tool calls `(id, name, arguments)`, stop reason tool use.
    Tools(Option<String>, Vec<(String, String, Value)>),
    /// Answer with this status, content type and body verbatim.
    Raw {
        status: u16,
        content_type: String,
        body: String,
    },
    /// Stream `text`, then keep the connection open without finishing.
    Hang(String),
    /// Wait until the gate is opened (`Notify::notify_one`), then answer with the step.
    Gate(Arc<tokio::sync::Notify>, Box<Step>),
    /// Stream these SSE events verbatim (each a whole `event:`/`data:` block ending in a
    /// blank line), one write each, the mock's chunk delay apart.
    Events(Vec<String>),
    /// The general answer: thinking, text and tool calls with their own chunking and pacing
    /// (the JSON script's steps; the mock's chunk delay does not apply).
    Answer(Answer),
}

/// One streamed answer of the general form ([`Step::Answer`]): thinking, then text, then tool
/// calls, each delta its own SSE event. Times are waits on the server's side.
#[derive(Debug, Clone, Default)]
pub struct Answer {
    /// Reasoning deltas (chat completions: `reasoning_content`; Anthropic: a `thinking` block).
    pub thinking: Option<String>,
    /// Text deltas. `{lastToolResult}` in it stands for the text of the request's last tool
    /// result (filled when the answer is chosen).
    pub text: Option<String>,
    /// Tool calls, in order. A call without an id gets `call_N` (N counts the mock's calls
    /// from 1, so ids stay unique across a conversation).
    pub tool_calls: Vec<AnswerCall>,
    /// Characters per delta (0 = 6, the default).
    pub chunk: usize,
    /// Split the text after each space (one word per delta) instead of by `chunk`.
    pub words: bool,
    /// Wait after each thinking or text delta.
    pub chunk_delay: Duration,
    /// Hold the rate by the wall clock: a late timer sends every delta that is due at once
    /// (one write), so `chunk_delay` stays the mean spacing on a loaded machine. Without it each
    /// delta is its own write, `chunk_delay` after the previous one.
    pub keep_rate: bool,
    /// Wait before answering at all (no status line yet).
    pub delay: Duration,
    /// Wait after the response head and the first (role) event, before any delta.
    pub first_delay: Duration,
    /// Keep the connection open after the last delta without finishing.
    pub hang: bool,
}

/// A tool call of an [`Answer`].
#[derive(Debug, Clone)]
pub struct AnswerCall {
    pub id: Option<String>,
    pub name: String,
    pub arguments: Value,
}

impl Step {
    pub fn text(t: &str) -> Step {
        Step::Text(t.into())
    }

    pub fn call(id: &str, name: &str, args: Value) -> Step {
        Step::Tools(None, vec![(id.into(), name.into(), args)])
    }

    /// A chat-completions answer of `text` that stops (`finish_reason: "stop"`) reporting
    /// `input` prompt and `output` completion tokens, as a raw SSE body: the role chunk, one
    /// content chunk, the finish chunk, the usage chunk and `[DONE]` (the usage of one step,
    /// whatever [`MockModel::set_usage`] says).
    pub fn text_with_usage(text: &str, input: u64, output: u64) -> Step {
        Step::finished(text, "stop", input, output)
    }

    /// [`Step::text_with_usage`] and [`Step::length`]: `text`, then `finish`, then the usage.
    fn finished(text: &str, finish: &str, input: u64, output: u64) -> Step {
        let chunk = |delta: Value, finish: Value| {
            format!(
                "data: {}\n\n",
                json!({"id": "c1", "object": "chat.completion.chunk", "model": "mock-1",
                    "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
            )
        };
        let body = [
            chunk(json!({"role": "assistant", "content": ""}), Value::Null),
            chunk(json!({"content": text}), Value::Null),
            chunk(json!({}), json!(finish)),
            format!(
                "data: {}\n\n",
                json!({"id": "c1", "object": "chat.completion.chunk", "choices": [],
                    "usage": {"prompt_tokens": input, "completion_tokens": output, "total_tokens": input + output}})
            ),
            "data: [DONE]\n\n".to_string(),
        ]
        .concat();
        Step::Raw {
            status: 200,
            content_type: "text/event-stream".into(),
            body,
        }
    }

    /// A chat-completions answer of `text` stopped by `length` (`finish_reason: "length"`)
    /// reporting `output` completion tokens (and 100 prompt tokens), as a raw SSE body: the
    /// role chunk, one content chunk, the finish chunk, the usage chunk and `[DONE]`. Whether
    /// it is a recoverable cut depends on `output` against the model's `maxTokens` (Pi 1.6's
    /// `isRecoverableLength`; [`MockModel::models_json`] declares `maxTokens` 4,096).
    pub fn length(text: &str, output: u64) -> Step {
        Step::finished(text, "length", 100, output)
    }

    /// One `edit` call replacing `old` with `new` in `path`.
    pub fn edit(id: &str, path: &str, old: &str, new: &str) -> Step {
        Step::call(
            id,
            "edit",
            serde_json::json!({"path": path, "edits": [{"oldText": old, "newText": new}]}),
        )
    }
}

/// One recorded request.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub path: String,
    pub headers: HeaderMap,
    pub body: Value,
}

/// Chooses the answer to a request by its body; `None` falls through to the script.
pub type Responder = Arc<dyn Fn(&Value) -> Option<Step> + Send + Sync>;

#[derive(Default)]
struct Inner {
    script: Vec<Step>,
    next: usize,
    requests: Vec<Recorded>,
    violations: Vec<String>,
    responder: Option<Responder>,
    /// Report `prompt_tokens` / `input_tokens` as the request body's length / 4 (else
    /// `input_tokens`).
    usage_from_body: bool,
    /// Input tokens every answer reports (`None`: 100).
    input_tokens: Option<u64>,
    /// Output tokens every answer reports (`None`: 10).
    output_tokens: Option<u64>,
    /// The `model` every chat-completions chunk names (none by default).
    response_model: Option<String>,
    /// The answer once the script is used up (`None`: "(mock script exhausted)").
    fallback: Option<Step>,
    /// Tool calls given a `call_N` id so far.
    calls: usize,
    /// Every request body is appended here as one JSON line.
    log: Option<std::fs::File>,
    /// Requests are not kept for [`MockModel::requests`] (a long-running server: the log
    /// has them).
    forget: bool,
}

/// The running server. The test's handle (and its clones) check tool pairing by
/// themselves: when the last of them is dropped, a request that broke pairing fails the test
/// ([`PairingCheck`]); [`MockModel::assert_paired`] checks earlier.
#[derive(Clone)]
pub struct MockModel {
    pub addr: SocketAddr,
    inner: Arc<Mutex<Inner>>,
    /// Pause between streamed chunks.
    chunk_delay: Duration,
    /// Held by the test's handles only (not by the server's): see [`PairingCheck`].
    _check: Option<Arc<PairingCheck>>,
}

/// Fails the test, when the test's last handle on the mock goes, if any request broke tool
/// pairing (unless the test is already failing).
struct PairingCheck(Arc<Mutex<Inner>>);

impl Drop for PairingCheck {
    fn drop(&mut self) {
        if std::thread::panicking() {
            return;
        }
        let v = match self.0.lock() {
            Ok(i) => i.violations.clone(),
            Err(p) => p.into_inner().violations.clone(),
        };
        assert!(v.is_empty(), "tool pairing violations: {v:#?}");
    }
}

impl MockModel {
    /// Starts a server on 127.0.0.1 (random port) serving `script` in order, 2 ms between
    /// streamed chunks.
    pub async fn start(script: Vec<Step>) -> MockModel {
        Self::start_with_delay(script, Duration::from_millis(2)).await
    }

    /// As [`MockModel::start`] with `chunk_delay` between streamed chunks (zero for benches).
    pub async fn start_with_delay(script: Vec<Step>, chunk_delay: Duration) -> MockModel {
        Self::serve(script, chunk_delay, true).await
    }

    /// As [`MockModel::start`] without the pairing check on drop (the `mock-model` binary:
    /// violations are answered with HTTP 400 and reported on stderr).
    pub async fn start_unchecked(script: Vec<Step>) -> MockModel {
        Self::serve(script, Duration::from_millis(2), false).await
    }

    async fn serve(script: Vec<Step>, chunk_delay: Duration, check: bool) -> MockModel {
        let inner = Arc::new(Mutex::new(Inner {
            script,
            ..Default::default()
        }));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let served = MockModel {
            addr,
            inner: inner.clone(),
            chunk_delay,
            _check: None,
        };
        let mock = MockModel {
            addr,
            inner: inner.clone(),
            chunk_delay,
            _check: check.then(|| Arc::new(PairingCheck(inner))),
        };
        let app = Router::new()
            .route("/v1/chat/completions", post(handle_openai))
            .route("/v1/messages", post(handle_anthropic))
            .route("/v1/responses", post(handle_responses))
            // Requests with large images are taken as a provider would (axum's default: 2 MB).
            .layer(axum::extract::DefaultBodyLimit::max(64 * 1024 * 1024))
            .with_state(served);
        tokio::spawn(async move {
            // Without TCP_NODELAY, Nagle plus delayed ACKs add ~40 ms to every small write.
            let listener = listener.tap_io(|tcp| {
                let _ = tcp.set_nodelay(true);
            });
            axum::serve(listener, app).await.unwrap();
        });
        mock
    }

    /// Base URL for an `openai-completions` provider.
    pub fn openai_base(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// The `openai-completions` model `mock/mock-1` at this server, with a test key and the
    /// given context window and output limit (tokens), as the loop tests drive it directly.
    pub fn completions_model(&self, context_window: u64, max_tokens: u64) -> pi_ai::Model {
        let mut model = pi_ai::Model::new(
            pi_ai::Api::OpenaiCompletions,
            "mock",
            "mock-1",
            &self.openai_base(),
        );
        model.api_key = Some("test-key".into());
        model.context_window = context_window;
        model.max_tokens = max_tokens;
        model
    }

    /// The `openai-responses` model `mockresp/mock-resp-1` at this server (`POST /v1/responses`),
    /// with a test key and the given context window and output limit (tokens).
    pub fn responses_model(&self, context_window: u64, max_tokens: u64) -> pi_ai::Model {
        let mut model = pi_ai::Model::new(
            pi_ai::Api::OpenaiResponses,
            "mockresp",
            "mock-resp-1",
            &self.openai_base(),
        );
        model.api_key = Some("test-key".into());
        model.context_window = context_window;
        model.max_tokens = max_tokens;
        model
    }

    /// Base URL for an `anthropic-messages` provider (the client appends `/v1/messages`).
    pub fn anthropic_base(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// A Pi models.json with providers `mock` (openai-completions, model `mock-1`) and
    /// `mockant` (anthropic-messages, model `mock-ant-1`).
    pub fn models_json(&self) -> Value {
        json!({"providers": {
            "mock": {"baseUrl": self.openai_base(), "api": "openai-completions", "apiKey": "test-key",
                      "compat": {"supportsDeveloperRole": false}, "models": [{"id": "mock-1", "contextWindow": 128000, "maxTokens": 4096}]},
            "mockant": {"baseUrl": self.anthropic_base(), "api": "anthropic-messages", "apiKey": "test-key",
                      "models": [{"id": "mock-ant-1", "contextWindow": 200000, "maxTokens": 4096}]}
        }})
    }

    /// Answers requests for which `responder` returns a step with that step (the script is
    /// not advanced); e.g. summary requests, told apart by their system prompt.
    pub fn set_responder(&self, responder: Responder) {
        self.inner.lock().unwrap().responder = Some(responder);
    }

    /// Reports input tokens as the request body's length / 4, like a provider counting what
    /// it was sent (by default every response reports 100).
    pub fn set_usage_from_body(&self, on: bool) {
        self.inner.lock().unwrap().usage_from_body = on;
    }

    /// Names `model` in every chat-completions chunk, as gateways that route to another model
    /// do (Pi then stores it as `responseModel`).
    pub fn set_response_model(&self, model: Option<&str>) {
        self.inner.lock().unwrap().response_model = model.map(str::to_string);
    }

    /// The tokens every answer reports: `input` (unless counted from the body,
    /// [`MockModel::set_usage_from_body`]) and `output` (by default 100 and 10).
    pub fn set_usage(&self, input: u64, output: u64) {
        let mut i = self.inner.lock().unwrap();
        i.input_tokens = Some(input);
        i.output_tokens = Some(output);
    }

    /// The answer to every request once the script is used up (by default the text
    /// "(mock script exhausted)").
    pub fn set_fallback(&self, step: Step) {
        self.inner.lock().unwrap().fallback = Some(step);
    }

    /// Appends every request body from now on to `file` as one JSON line (written and flushed
    /// before the answer starts, so whoever sees the answer can read the request).
    pub fn log_requests(&self, file: std::fs::File) {
        self.inner.lock().unwrap().log = Some(file);
    }

    /// Keeps no request for [`MockModel::requests`] from now on (a long-running server's
    /// memory stays flat; [`MockModel::log_requests`] still writes them).
    pub fn forget_requests(&self) {
        self.inner.lock().unwrap().forget = true;
    }

    fn input_tokens(&self, body: &Value) -> u64 {
        let i = self.inner.lock().unwrap();
        if i.usage_from_body {
            (body.to_string().len() / 4) as u64
        } else {
            i.input_tokens.unwrap_or(100)
        }
    }

    fn output_tokens(&self) -> u64 {
        self.inner.lock().unwrap().output_tokens.unwrap_or(10)
    }

    /// Every request so far.
    pub fn requests(&self) -> Vec<Recorded> {
        self.inner.lock().unwrap().requests.clone()
    }

    /// Panics when any request broke tool-call pairing.
    pub fn assert_paired(&self) {
        let v = self.inner.lock().unwrap().violations.clone();
        assert!(v.is_empty(), "tool pairing violations: {v:#?}");
    }

    fn take(
        &self,
        path: &str,
        headers: HeaderMap,
        body: Value,
        violation: Option<String>,
    ) -> Option<Step> {
        let mut guard = self.inner.lock().unwrap();
        let i = &mut *guard;
        let chosen = i.responder.as_ref().and_then(|r| r(&body));
        if let Some(log) = i.log.as_mut() {
            let line = format!("{body}\n");
            if let Err(e) = log.write_all(line.as_bytes()).and_then(|()| log.flush()) {
                eprintln!("mock model: cannot write the request log: {e}");
            }
        }
        let tool_result = last_tool_result(&body);
        if !i.forget {
            i.requests.push(Recorded {
                path: path.into(),
                headers,
                body,
            });
        }
        if let Some(v) = violation {
            eprintln!("mock model: tool pairing violation: {v}");
            i.violations.push(v);
            return None;
        }
        let step = match chosen {
            Some(s) => s,
            None => {
                let step = i.script.get(i.next).cloned();
                i.next += 1;
                step.or_else(|| i.fallback.clone())
                    .unwrap_or_else(|| Step::Text("(mock script exhausted)".into()))
            }
        };
        Some(match step {
            Step::Answer(mut a) => {
                if let (Some(t), Some(r)) = (&a.text, &tool_result) {
                    a.text = Some(t.replace("{lastToolResult}", r));
                }
                for c in &mut a.tool_calls {
                    if c.id.is_none() {
                        i.calls += 1;
                        c.id = Some(format!("call_{}", i.calls));
                    }
                }
                Step::Answer(a)
            }
            s => s,
        })
    }
}

/// The text of a request's last tool result (chat completions: the last `tool` message;
/// Anthropic: the last `tool_result` block), text blocks joined.
pub fn last_tool_result(body: &Value) -> Option<String> {
    let text = |c: &Value| match c {
        Value::String(s) => s.clone(),
        Value::Array(blocks) => blocks
            .iter()
            .filter_map(|b| b["text"].as_str())
            .collect::<String>(),
        _ => String::new(),
    };
    if let Some(items) = body["input"].as_array() {
        // openai-responses: the last `function_call_output` item.
        return items
            .iter()
            .rev()
            .find(|i| i["type"] == "function_call_output")
            .map(|i| text(&i["output"]));
    }
    let msgs = body["messages"].as_array()?;
    msgs.iter().rev().find_map(|m| {
        if m["role"] == "tool" {
            return Some(text(&m["content"]));
        }
        m["content"]
            .as_array()?
            .iter()
            .rev()
            .find(|b| b["type"] == "tool_result")
            .map(|b| text(&b["content"]))
    })
}

/// Checks chat-completions messages: each assistant `tool_calls` entry must be answered by a
/// `tool` message right after it, and no `tool` message may lack its call.
pub fn openai_pairing(body: &Value) -> Option<String> {
    let msgs = body["messages"].as_array()?;
    let mut open: Vec<String> = Vec::new();
    for (i, m) in msgs.iter().enumerate() {
        match m["role"].as_str() {
            Some("tool") => {
                let id = m["tool_call_id"].as_str().unwrap_or("");
                match open.iter().position(|o| o == id) {
                    Some(p) => {
                        open.remove(p);
                    }
                    None => {
                        return Some(format!(
                            "messages[{i}]: tool result {id} has no preceding call"
                        ))
                    }
                }
            }
            _ => {
                if !open.is_empty() {
                    return Some(format!("messages[{i}]: calls {open:?} have no results"));
                }
                if let Some(calls) = m["tool_calls"].as_array() {
                    open = calls
                        .iter()
                        .map(|c| c["id"].as_str().unwrap_or("").to_string())
                        .collect();
                }
            }
        }
    }
    (!open.is_empty()).then(|| format!("calls {open:?} at the end have no results"))
}

/// Checks openai-responses input items: each `function_call` must be answered by its
/// `function_call_output` (same `call_id`) before the next item of another kind, and no output
/// may lack its call.
pub fn responses_pairing(body: &Value) -> Option<String> {
    let items = body["input"].as_array()?;
    let mut open: Vec<String> = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let call_id = item["call_id"].as_str().unwrap_or("").to_string();
        match item["type"].as_str() {
            Some("function_call") => open.push(call_id),
            Some("function_call_output") => match open.iter().position(|o| *o == call_id) {
                Some(p) => {
                    open.remove(p);
                }
                None => {
                    return Some(format!(
                        "input[{i}]: function_call_output {call_id} has no preceding call"
                    ))
                }
            },
            // Reasoning items may stand between a message and its calls.
            Some("reasoning") => {}
            _ => {
                if !open.is_empty() {
                    return Some(format!("input[{i}]: calls {open:?} have no outputs"));
                }
            }
        }
    }
    (!open.is_empty()).then(|| format!("calls {open:?} at the end have no outputs"))
}

/// Checks Anthropic messages: every `tool_use` must be answered by a `tool_result` in the
/// next (user) message, results first; no result may lack its `tool_use`.
pub fn anthropic_pairing(body: &Value) -> Option<String> {
    let msgs = body["messages"].as_array()?;
    let mut open: Vec<String> = Vec::new();
    for (i, m) in msgs.iter().enumerate() {
        let blocks = m["content"].as_array().cloned().unwrap_or_default();
        let mut seen_other = false;
        for b in &blocks {
            if b["type"] == "tool_result" {
                let id = b["tool_use_id"].as_str().unwrap_or("");
                if seen_other {
                    return Some(format!(
                        "messages[{i}]: tool_result {id} after other content"
                    ));
                }
                match open.iter().position(|o| o == id) {
                    Some(p) => {
                        open.remove(p);
                    }
                    None => {
                        return Some(format!("messages[{i}]: tool_result {id} has no tool_use"))
                    }
                }
            } else {
                seen_other = true;
            }
        }
        if !open.is_empty() {
            return Some(format!(
                "messages[{i}]: tool_use {open:?} have no tool_result"
            ));
        }
        if m["role"] == "assistant" {
            open = blocks
                .iter()
                .filter(|b| b["type"] == "tool_use")
                .map(|b| b["id"].as_str().unwrap_or("").to_string())
                .collect();
        }
    }
    (!open.is_empty()).then(|| format!("tool_use {open:?} at the end have no tool_result"))
}

fn chunks(text: &str) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    chars.chunks(5).map(|c| c.iter().collect()).collect()
}

fn sse(events: Vec<String>, delay: Duration, hang: bool) -> Response {
    let stream = async_stream(events, delay, hang);
    Response::builder()
        .status(200)
        .header("content-type", "text/event-stream")
        .body(Body::from_stream(stream))
        .unwrap()
}

fn async_stream(
    events: Vec<String>,
    delay: Duration,
    hang: bool,
) -> impl futures::Stream<Item = Result<bytes::Bytes, std::io::Error>> {
    futures::stream::unfold(
        (events.into_iter(), hang),
        move |(mut it, hang)| async move {
            match it.next() {
                Some(e) => {
                    // A zero-length sleep still waits for the timer's next 1 ms tick.
                    if !delay.is_zero() {
                        tokio::time::sleep(delay).await;
                    }
                    Some((Ok(bytes::Bytes::from(e)), (it, hang)))
                }
                None if hang => {
                    tokio::time::sleep(Duration::from_secs(3600)).await;
                    None
                }
                None => None,
            }
        },
    )
}

fn raw(status: u16, content_type: &str, body: &str) -> Response {
    Response::builder()
        .status(StatusCode::from_u16(status).unwrap())
        .header("content-type", content_type)
        .body(Body::from(body.to_string()))
        .unwrap()
}

async fn handle_openai(
    State(mock): State<MockModel>,
    headers: HeaderMap,
    body: String,
) -> Response {
    let body: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
    let violation = openai_pairing(&body);
    let input_tokens = mock.input_tokens(&body);
    let output_tokens = mock.output_tokens();
    let Some(step) = mock.take("/v1/chat/completions", headers, body, violation.clone()) else {
        return raw(400, "application/json", &json!({"error":{"message": format!("No tool output found for function call: {}", violation.unwrap_or_default())}}).to_string());
    };
    let step = match step {
        Step::Gate(gate, inner) => {
            gate.notified().await;
            *inner
        }
        s => s,
    };
    if let Step::Events(ev) = step {
        return sse(ev, mock.chunk_delay, false);
    }
    let n = mock.inner.lock().unwrap().next;
    let id = format!("chatcmpl-mock{n}");
    let response_model = mock.inner.lock().unwrap().response_model.clone();
    if let Step::Answer(a) = step {
        // A zero-length sleep still waits for the timer's next 1 ms tick.
        if !a.delay.is_zero() {
            tokio::time::sleep(a.delay).await;
        }
        let ev = openai_answer(
            &a,
            &id,
            response_model.as_deref(),
            input_tokens,
            mock.output_tokens(),
        );
        return paced(ev, a.keep_rate, a.hang);
    }
    let chunk = |delta: Value, finish: Value| {
        let mut c = json!({"id": id, "object":"chat.completion.chunk","choices":[{"index":0,"delta":delta,"finish_reason":finish}]});
        if let Some(m) = &response_model {
            c["model"] = json!(m);
        }
        format!("data: {c}\n\n")
    };
    let usage = format!(
        "data: {}\n\n",
        json!({"id": id, "choices": [], "usage": {"prompt_tokens": input_tokens, "completion_tokens": output_tokens, "total_tokens": input_tokens + output_tokens}})
    );
    let mut ev = Vec::new();
    let (hang, finish) = match &step {
        Step::Raw {
            status,
            content_type,
            body,
        } => return raw(*status, content_type, body),
        Step::Gate(..) => unreachable!("gates are opened before the answer is built"),
        Step::Events(..) | Step::Answer(..) => unreachable!("streamed as they are above"),
        Step::Text(t) | Step::Hang(t) => {
            ev.push(chunk(json!({"role":"assistant","content":""}), Value::Null));
            for c in chunks(t) {
                ev.push(chunk(json!({"content": c}), Value::Null));
            }
            (matches!(step, Step::Hang(_)), "stop")
        }
        Step::Tools(text, calls) => {
            if let Some(t) = text {
                for c in chunks(t) {
                    ev.push(chunk(json!({"content": c}), Value::Null));
                }
            }
            for (i, (cid, name, args)) in calls.iter().enumerate() {
                ev.push(chunk(json!({"tool_calls":[{"index":i,"id":cid,"type":"function","function":{"name":name,"arguments":""}}]}), Value::Null));
                let a = args.to_string();
                let mid = a.len() / 2;
                let mid = (0..=mid)
                    .rev()
                    .find(|m| a.is_char_boundary(*m))
                    .unwrap_or(0);
                for part in [&a[..mid], &a[mid..]] {
                    ev.push(chunk(
                        json!({"tool_calls":[{"index":i,"function":{"arguments":part}}]}),
                        Value::Null,
                    ));
                }
            }
            (false, "tool_calls")
        }
    };
    if !hang {
        ev.push(chunk(json!({}), json!(finish)));
        ev.push(usage);
        ev.push("data: [DONE]\n\n".into());
    }
    sse(ev, mock.chunk_delay, hang)
}

async fn handle_anthropic(
    State(mock): State<MockModel>,
    headers: HeaderMap,
    body: String,
) -> Response {
    let body: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
    let violation = anthropic_pairing(&body);
    let input_tokens = mock.input_tokens(&body);
    let output_tokens = mock.output_tokens();
    let Some(step) = mock.take("/v1/messages", headers, body, violation.clone()) else {
        return raw(400, "application/json", &json!({"type":"error","error":{"type":"invalid_request_error","message": format!("`tool_use` ids were found without `tool_result` blocks immediately after: {}", violation.unwrap_or_default())}}).to_string());
    };
    let step = match step {
        Step::Gate(gate, inner) => {
            gate.notified().await;
            *inner
        }
        s => s,
    };
    if let Step::Events(ev) = step {
        return sse(ev, mock.chunk_delay, false);
    }
    let n = mock.inner.lock().unwrap().next;
    if let Step::Answer(a) = step {
        // A zero-length sleep still waits for the timer's next 1 ms tick.
        if !a.delay.is_zero() {
            tokio::time::sleep(a.delay).await;
        }
        let ev = anthropic_answer(&a, n, input_tokens, mock.output_tokens());
        return paced(ev, a.keep_rate, a.hang);
    }
    let e = |name: &str, data: Value| format!("event: {name}\ndata: {data}\n\n");
    let mut ev = vec![e(
        "message_start",
        json!({"type":"message_start","message":{"id":format!("msg_mock{n}"),"type":"message","role":"assistant","content":[],"model":"mock-ant-1","usage":{"input_tokens":input_tokens,"output_tokens":1}}}),
    )];
    let mut idx = 0;
    let text_block = |ev: &mut Vec<String>, idx: usize, t: &str| {
        ev.push(e("content_block_start", json!({"type":"content_block_start","index":idx,"content_block":{"type":"text","text":""}})));
        for c in chunks(t) {
            ev.push(e("content_block_delta", json!({"type":"content_block_delta","index":idx,"delta":{"type":"text_delta","text":c}})));
        }
    };
    let (hang, stop) = match &step {
        Step::Raw {
            status,
            content_type,
            body,
        } => return raw(*status, content_type, body),
        Step::Gate(..) => unreachable!("gates are opened before the answer is built"),
        Step::Events(..) | Step::Answer(..) => unreachable!("streamed as they are above"),
        Step::Text(t) | Step::Hang(t) => {
            text_block(&mut ev, 0, t);
            if matches!(step, Step::Hang(_)) {
                (true, "end_turn")
            } else {
                ev.push(e(
                    "content_block_stop",
                    json!({"type":"content_block_stop","index":0}),
                ));
                (false, "end_turn")
            }
        }
        Step::Tools(text, calls) => {
            if let Some(t) = text {
                text_block(&mut ev, 0, t);
                ev.push(e(
                    "content_block_stop",
                    json!({"type":"content_block_stop","index":0}),
                ));
                idx = 1;
            }
            for (cid, name, args) in calls {
                ev.push(e("content_block_start", json!({"type":"content_block_start","index":idx,"content_block":{"type":"tool_use","id":cid,"name":name,"input":{}}})));
                let a = args.to_string();
                let mid = (0..=a.len() / 2)
                    .rev()
                    .find(|m| a.is_char_boundary(*m))
                    .unwrap_or(0);
                for part in [&a[..mid], &a[mid..]] {
                    ev.push(e("content_block_delta", json!({"type":"content_block_delta","index":idx,"delta":{"type":"input_json_delta","partial_json":part}})));
                }
                ev.push(e(
                    "content_block_stop",
                    json!({"type":"content_block_stop","index":idx}),
                ));
                idx += 1;
            }
            (false, "tool_use")
        }
    };
    if !hang {
        ev.push(e("message_delta", json!({"type":"message_delta","delta":{"stop_reason":stop},"usage":{"output_tokens":output_tokens}})));
        ev.push(e("message_stop", json!({"type":"message_stop"})));
    }
    sse(ev, mock.chunk_delay, hang)
}

/// `POST /v1/responses`: the scripted step as an openai-responses stream (`response.created`,
/// one output item per text or call with its deltas, `response.completed` with usage). An
/// [`Step::Answer`] is sent by its text and calls, unpaced (thinking is left out).
async fn handle_responses(
    State(mock): State<MockModel>,
    headers: HeaderMap,
    body: String,
) -> Response {
    let body: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
    let violation = responses_pairing(&body);
    let input_tokens = mock.input_tokens(&body);
    let output_tokens = mock.output_tokens();
    let Some(step) = mock.take("/v1/responses", headers, body, violation.clone()) else {
        return raw(400, "application/json", &json!({"error":{"type":"invalid_request_error","message": format!("No tool output found for function call {}.", violation.unwrap_or_default())}}).to_string());
    };
    let step = match step {
        Step::Gate(gate, inner) => {
            gate.notified().await;
            *inner
        }
        s => s,
    };
    let (text, calls, hang) = match step {
        Step::Events(ev) => return sse(ev, mock.chunk_delay, false),
        Step::Raw {
            status,
            content_type,
            body,
        } => return raw(status, &content_type, &body),
        Step::Gate(..) => unreachable!("gates are opened before the answer is built"),
        Step::Text(t) => (Some(t), Vec::new(), false),
        Step::Hang(t) => (Some(t), Vec::new(), true),
        Step::Tools(t, calls) => (t, calls, false),
        Step::Answer(a) => {
            if !a.delay.is_zero() {
                tokio::time::sleep(a.delay).await;
            }
            let calls = a
                .tool_calls
                .iter()
                .enumerate()
                .map(|(i, c)| {
                    let id = c.id.clone().unwrap_or_else(|| format!("call_{}", i + 1));
                    (id, c.name.clone(), c.arguments.clone())
                })
                .collect();
            (a.text.clone(), calls, a.hang)
        }
    };
    let n = mock.inner.lock().unwrap().next;
    let rid = format!("resp_mock{n}");
    let e = |data: Value| {
        format!(
            "event: {}\ndata: {data}\n\n",
            data["type"].as_str().unwrap_or("")
        )
    };
    let mut ev = vec![e(
        json!({"type":"response.created","response":{"id":rid,"status":"in_progress","output":[]}}),
    )];
    let mut output = Vec::new();
    if let Some(t) = &text {
        let idx = output.len();
        let mid = format!("msg_mock{n}");
        ev.push(e(json!({"type":"response.output_item.added","output_index":idx,"item":{"type":"message","id":mid,"role":"assistant","status":"in_progress","content":[]}})));
        for c in chunks(t) {
            ev.push(e(json!({"type":"response.output_text.delta","output_index":idx,"content_index":0,"item_id":mid,"delta":c})));
        }
        if hang {
            return sse(ev, mock.chunk_delay, true);
        }
        let item = json!({"type":"message","id":mid,"role":"assistant","status":"completed","content":[{"type":"output_text","text":t,"annotations":[]}]});
        ev.push(e(
            json!({"type":"response.output_item.done","output_index":idx,"item":item}),
        ));
        output.push(item);
    }
    for (cid, name, args) in &calls {
        let idx = output.len();
        let fid = format!("fc_{cid}");
        ev.push(e(json!({"type":"response.output_item.added","output_index":idx,"item":{"type":"function_call","id":fid,"call_id":cid,"name":name,"arguments":"","status":"in_progress"}})));
        let [first, second] = halves(args);
        for part in [first, second] {
            ev.push(e(json!({"type":"response.function_call_arguments.delta","output_index":idx,"item_id":fid,"delta":part})));
        }
        let a = args.to_string();
        ev.push(e(json!({"type":"response.function_call_arguments.done","output_index":idx,"item_id":fid,"arguments":a})));
        let item = json!({"type":"function_call","id":fid,"call_id":cid,"name":name,"arguments":a,"status":"completed"});
        ev.push(e(
            json!({"type":"response.output_item.done","output_index":idx,"item":item}),
        ));
        output.push(item);
    }
    ev.push(e(json!({"type":"response.completed","response":{"id":rid,"status":"completed","output":output,
        "usage":{"input_tokens":input_tokens,"output_tokens":output_tokens,"total_tokens":input_tokens + output_tokens}}})));
    sse(ev, mock.chunk_delay, false)
}

/// An [`Answer`]'s events, each with the wait before it.
type Paced = Vec<(Duration, String)>;

/// The deltas of `text` for `a`: `a.chunk` characters each (default 6), or one word each.
fn answer_parts(a: &Answer, text: &str) -> Vec<String> {
    if a.words {
        return text.split_inclusive(' ').map(str::to_string).collect();
    }
    let size = if a.chunk == 0 { 6 } else { a.chunk };
    let chars: Vec<char> = text.chars().collect();
    chars.chunks(size).map(|c| c.iter().collect()).collect()
}

/// Splits a call's arguments into two halves at a character boundary (a client must join
/// streamed argument fragments).
fn halves(args: &Value) -> [String; 2] {
    let a = args.to_string();
    let mid = (0..=a.len() / 2)
        .rev()
        .find(|m| a.is_char_boundary(*m))
        .unwrap_or(0);
    [a[..mid].to_string(), a[mid..].to_string()]
}

/// Collects events with their waits: `first_delay` after the first event, `chunk_delay` after
/// each thinking or text delta.
struct Pacer<'a> {
    a: &'a Answer,
    out: Paced,
    wait: Duration,
}

impl Pacer<'_> {
    fn push(&mut self, event: String) {
        let wait = std::mem::take(&mut self.wait);
        if self.out.is_empty() {
            self.wait = self.a.first_delay;
        }
        self.out.push((wait, event));
    }

    fn delta(&mut self, event: String) {
        self.push(event);
        self.wait = self.a.chunk_delay;
    }
}

/// An [`Answer`] as chat-completions chunks (role, reasoning, content, tool calls, finish,
/// usage, `[DONE]`; a hanging answer stops after its deltas).
fn openai_answer(
    a: &Answer,
    id: &str,
    response_model: Option<&str>,
    input_tokens: u64,
    output_tokens: u64,
) -> Paced {
    let chunk = |delta: Value, finish: Value| {
        let mut c = json!({"id": id, "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]});
        if let Some(m) = response_model {
            c["model"] = json!(m);
        }
        format!("data: {c}\n\n")
    };
    let mut p = Pacer {
        a,
        out: Vec::new(),
        wait: Duration::ZERO,
    };
    p.push(chunk(
        json!({"role": "assistant", "content": ""}),
        Value::Null,
    ));
    for t in answer_parts(a, a.thinking.as_deref().unwrap_or("")) {
        p.delta(chunk(json!({"reasoning_content": t}), Value::Null));
    }
    for t in answer_parts(a, a.text.as_deref().unwrap_or("")) {
        p.delta(chunk(json!({"content": t}), Value::Null));
    }
    if a.hang {
        return p.out;
    }
    for (i, c) in a.tool_calls.iter().enumerate() {
        p.push(chunk(json!({"tool_calls": [{"index": i, "id": c.id, "type": "function", "function": {"name": c.name, "arguments": ""}}]}), Value::Null));
        for part in halves(&c.arguments) {
            p.push(chunk(
                json!({"tool_calls": [{"index": i, "function": {"arguments": part}}]}),
                Value::Null,
            ));
        }
    }
    let finish = if a.tool_calls.is_empty() {
        "stop"
    } else {
        "tool_calls"
    };
    p.push(chunk(json!({}), json!(finish)));
    p.push(format!(
        "data: {}\n\n",
        json!({"id": id, "choices": [], "usage": {"prompt_tokens": input_tokens, "completion_tokens": output_tokens, "total_tokens": input_tokens + output_tokens}})
    ));
    p.push("data: [DONE]\n\n".into());
    p.out
}

/// An [`Answer`] as Anthropic Messages events (a thinking block with its signature, a text
/// block, tool_use blocks; a hanging answer stops after its deltas).
fn anthropic_answer(a: &Answer, n: usize, input_tokens: u64, output_tokens: u64) -> Paced {
    let e = |name: &str, data: Value| format!("event: {name}\ndata: {data}\n\n");
    let mut p = Pacer {
        a,
        out: Vec::new(),
        wait: Duration::ZERO,
    };
    p.push(e("message_start", json!({"type": "message_start", "message": {"id": format!("msg_mock{n}"), "type": "message", "role": "assistant", "content": [], "model": "mock-ant-1", "usage": {"input_tokens": input_tokens, "output_tokens": 1}}})));
    let mut idx = 0;
    let stop = |idx: usize| {
        e(
            "content_block_stop",
            json!({"type": "content_block_stop", "index": idx}),
        )
    };
    if let Some(t) = &a.thinking {
        p.push(e("content_block_start", json!({"type": "content_block_start", "index": idx, "content_block": {"type": "thinking", "thinking": ""}})));
        for part in answer_parts(a, t) {
            p.delta(e("content_block_delta", json!({"type": "content_block_delta", "index": idx, "delta": {"type": "thinking_delta", "thinking": part}})));
        }
        p.push(e("content_block_delta", json!({"type": "content_block_delta", "index": idx, "delta": {"type": "signature_delta", "signature": "bW9jaw=="}})));
        p.push(stop(idx));
        idx += 1;
    }
    if let Some(t) = &a.text {
        p.push(e("content_block_start", json!({"type": "content_block_start", "index": idx, "content_block": {"type": "text", "text": ""}})));
        for part in answer_parts(a, t) {
            p.delta(e("content_block_delta", json!({"type": "content_block_delta", "index": idx, "delta": {"type": "text_delta", "text": part}})));
        }
        if a.hang {
            return p.out;
        }
        p.push(stop(idx));
        idx += 1;
    }
    if a.hang {
        return p.out;
    }
    for c in &a.tool_calls {
        p.push(e("content_block_start", json!({"type": "content_block_start", "index": idx, "content_block": {"type": "tool_use", "id": c.id, "name": c.name, "input": {}}})));
        for part in halves(&c.arguments) {
            p.push(e("content_block_delta", json!({"type": "content_block_delta", "index": idx, "delta": {"type": "input_json_delta", "partial_json": part}})));
        }
        p.push(stop(idx));
        idx += 1;
    }
    let reason = if a.tool_calls.is_empty() {
        "end_turn"
    } else {
        "tool_use"
    };
    p.push(e("message_delta", json!({"type": "message_delta", "delta": {"stop_reason": reason}, "usage": {"output_tokens": output_tokens}})));
    p.push(e("message_stop", json!({"type": "message_stop"})));
    p.out
}

/// Streams paced events. With no wait anywhere (and no hang) the whole answer is one body of
/// known length, written at once (the benchmarks' floor). Otherwise each event is its own
/// write after its wait, or with `keep_rate` every event already due by the wall clock goes
/// in one write; `hang` keeps the connection open after the last event.
fn paced(events: Paced, keep_rate: bool, hang: bool) -> Response {
    let response = Response::builder()
        .status(200)
        .header("content-type", "text/event-stream");
    if !hang && events.iter().all(|(w, _)| w.is_zero()) {
        let body: String = events.into_iter().map(|(_, e)| e).collect();
        return response.body(Body::from(body)).unwrap();
    }
    let start = tokio::time::Instant::now();
    let stream = futures::stream::unfold(
        (events.into_iter().peekable(), Duration::ZERO),
        move |(mut it, mut due)| async move {
            let (wait, first) = match it.next() {
                Some(e) => e,
                None if hang => {
                    tokio::time::sleep(Duration::from_secs(3600)).await;
                    return None;
                }
                None => return None,
            };
            due += wait;
            if keep_rate {
                tokio::time::sleep_until(start + due).await;
                let mut out = first;
                while let Some((w, _)) = it.peek() {
                    if start + due + *w > tokio::time::Instant::now() {
                        break;
                    }
                    due += *w;
                    if let Some((_, e)) = it.next() {
                        out.push_str(&e);
                    }
                }
                Some((Ok::<_, std::io::Error>(bytes::Bytes::from(out)), (it, due)))
            } else {
                if !wait.is_zero() {
                    tokio::time::sleep(wait).await;
                }
                Some((Ok(bytes::Bytes::from(first)), (it, due)))
            }
        },
    );
    response.body(Body::from_stream(stream)).unwrap()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairing_checks_catch_both_faults() {
        let ok = json!({"messages":[{"role":"user","content":"x"},{"role":"assistant","tool_calls":[{"id":"a"}]},{"role":"tool","tool_call_id":"a"}]});
        assert_eq!(openai_pairing(&ok), None);
        let missing = json!({"messages":[{"role":"assistant","tool_calls":[{"id":"a"}]},{"role":"user","content":"x"}]});
        assert!(openai_pairing(&missing).is_some());
        let orphan = json!({"messages":[{"role":"tool","tool_call_id":"z"}]});
        assert!(openai_pairing(&orphan).is_some());
        let ant = json!({"messages":[{"role":"assistant","content":[{"type":"tool_use","id":"t"}]},{"role":"user","content":[{"type":"text","text":"x"}]}]});
        assert!(anthropic_pairing(&ant).is_some());
    }
}

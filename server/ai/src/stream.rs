//! The assistant event stream: progress events, then exactly one terminal `done` or `error`.
//!
//! Seed §2 "Streaming has two outputs": progress events for rendering (here with the newest
//! fragment only, `delta`), and a terminal event carrying the canonical [`AssistantMessage`].
//! The adapter, not the consumer, reconstructs the message: [`MessageBuilder`] is the one place
//! that turns wire fragments into blocks, and every adapter drives it.
//!
//! Failures are encoded in the stream (an `error` event whose message has `stopReason` `error` or
//! `aborted`), never returned as `Err`; the `error` event also carries the typed
//! [`crate::errors::ProviderError`] (not serialized). A consumer that drops the
//! [`AssistantStream`] closes the channel; the producing task notices on its next send and
//! drops the HTTP body.
//!
//! Pi's `partial` (the message accumulated so far) is not copied into every event: the builder
//! keeps it behind a mutex shared with the stream, and [`AssistantStream::partial`] clones a
//! snapshot only when asked, so events (and the editor's wire) stay delta-only. Tool-call
//! arguments in the partial are re-parsed best-effort after each delta
//! ([`crate::json::parse_partial_arguments`]); the final arguments are parsed strictly.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::mpsc;

use crate::errors::ProviderError;
use crate::models::{Model, ModelCost};
use crate::types::{AssistantMessage, ContentBlock, StopReason, ThinkingContent, ToolCall, Usage};

/// One progress or terminal event of an assistant stream (Pi's `AssistantMessageEvent`, without
/// the accumulated `partial`: deltas carry only the newest fragment). Read back (by clients and
/// tests) an `error` event's `failure` is [`ProviderError::Provider`] with the `errorMessage`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
#[serde(
    tag = "type",
    rename_all = "snake_case",
    rename_all_fields = "camelCase"
)]
pub enum AssistantEvent {
    /// The response began.
    Start,
    TextStart {
        content_index: usize,
    },
    TextDelta {
        content_index: usize,
        delta: String,
    },
    TextEnd {
        content_index: usize,
        content: String,
    },
    ThinkingStart {
        content_index: usize,
    },
    ThinkingDelta {
        content_index: usize,
        delta: String,
    },
    ThinkingEnd {
        content_index: usize,
        content: String,
    },
    ToolcallStart {
        content_index: usize,
        id: String,
        name: String,
    },
    /// A fragment of the tool call's JSON argument text.
    ToolcallDelta {
        content_index: usize,
        delta: String,
    },
    ToolcallEnd {
        content_index: usize,
        tool_call: ToolCall,
    },
    /// Terminal: the canonical message, `stopReason` stop / length / toolUse.
    Done {
        reason: StopReason,
        message: AssistantMessage,
    },
    /// Terminal: the canonical message with `stopReason` error or aborted and `errorMessage`.
    /// `failure` is the typed error (class, HTTP status, `Retry-After`) for the loop's retry
    /// and compaction decisions; it is not serialized (the editor sees Pi's event shape).
    Error {
        reason: StopReason,
        error: AssistantMessage,
        #[serde(skip, default = "unread_failure")]
        failure: ProviderError,
    },
}

/// The `failure` of an `error` event read back from JSON (where it is not written).
fn unread_failure() -> ProviderError {
    ProviderError::Provider {
        message: String::new(),
    }
}

impl AssistantEvent {
    /// The canonical message of a terminal event.
    pub fn terminal_message(&self) -> Option<&AssistantMessage> {
        match self {
            AssistantEvent::Done { message, .. } => Some(message),
            AssistantEvent::Error { error, .. } => Some(error),
            _ => None,
        }
    }

    /// The typed failure of a terminal `error` event.
    pub fn failure(&self) -> Option<&ProviderError> {
        match self {
            AssistantEvent::Error { failure, .. } => Some(failure),
            _ => None,
        }
    }
}

/// The message being reconstructed, shared by the producing [`MessageBuilder`] and the
/// consuming [`AssistantStream`] (for [`AssistantStream::partial`]).
type Shared = Arc<Mutex<AssistantMessage>>;

fn lock(m: &Shared) -> MutexGuard<'_, AssistantMessage> {
    // A panic while holding the lock leaves a usable message: take it anyway.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The receiving end of one model response.
#[derive(Debug)]
pub struct AssistantStream {
    rx: mpsc::Receiver<AssistantEvent>,
    finished: bool,
    partial: Shared,
}

/// The producing end of one model response: events plus the shared partial message. Hand it
/// to [`MessageBuilder::start`].
#[derive(Debug)]
pub struct StreamSender {
    tx: mpsc::Sender<AssistantEvent>,
    partial: Shared,
}

impl AssistantStream {
    /// A connected pair: the sender goes to the producing adapter task.
    pub fn channel() -> (StreamSender, AssistantStream) {
        let (tx, rx) = mpsc::channel(256);
        let partial: Shared = Arc::new(Mutex::new(AssistantMessage::empty("", "", "")));
        (
            StreamSender {
                tx,
                partial: partial.clone(),
            },
            AssistantStream {
                rx,
                finished: false,
                partial,
            },
        )
    }

    /// A snapshot of the message accumulated so far (Pi's `partial`): text, thinking, tool
    /// calls with best-effort parsed arguments, usage. Cloned only when asked for, so events
    /// stay delta-only. The producer may be a few events ahead of the consumer.
    pub fn partial(&self) -> AssistantMessage {
        lock(&self.partial).clone()
    }

    /// The next event; `None` after the terminal event. If the producer vanished without a
    /// terminal event (a bug or a panic), a synthetic `error` event is returned once.
    pub async fn next(&mut self) -> Option<AssistantEvent> {
        if self.finished {
            return None;
        }
        match self.rx.recv().await {
            Some(ev) => {
                if ev.terminal_message().is_some() {
                    self.finished = true;
                }
                Some(ev)
            }
            None => {
                self.finished = true;
                let failure = ProviderError::Provider {
                    message: "model stream ended without a result".into(),
                };
                let mut m = self.partial();
                m.stop_reason = StopReason::Error;
                m.error_message = Some(failure.message());
                Some(AssistantEvent::Error {
                    reason: StopReason::Error,
                    error: m,
                    failure,
                })
            }
        }
    }

    /// Drains the stream and returns the canonical message.
    pub async fn result(mut self) -> AssistantMessage {
        let mut last = None;
        while let Some(ev) = self.next().await {
            if let Some(m) = ev.terminal_message() {
                last = Some(m.clone());
            }
        }
        last.unwrap_or_else(|| AssistantMessage::empty("", "", ""))
    }
}

/// The consumer dropped the stream: stop producing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("assistant stream consumer went away")]
pub struct Closed;

/// A builder's open blocks by key: a few at a time, so a list searched in order (a delta
/// costs no hashing).
#[derive(Debug, Default)]
struct OpenBlocks(Vec<(String, usize)>);

impl OpenBlocks {
    fn get(&self, key: &str) -> Option<&usize> {
        self.0.iter().find(|(k, _)| k == key).map(|(_, i)| i)
    }

    fn contains_key(&self, key: &str) -> bool {
        self.get(key).is_some()
    }

    fn insert(&mut self, key: String, index: usize) {
        match self.0.iter_mut().find(|(k, _)| *k == key) {
            Some(entry) => entry.1 = index,
            None => self.0.push((key, index)),
        }
    }

    fn remove(&mut self, key: &str) -> Option<usize> {
        let at = self.0.iter().position(|(k, _)| k == key)?;
        Some(self.0.swap_remove(at).1)
    }

    fn clear(&mut self) {
        self.0.clear();
    }
}

/// A follower's key of block `index` (its decimal digits), formatted without allocating.
struct IndexKey {
    digits: [u8; 20],
    start: usize,
}

impl IndexKey {
    fn of(mut index: usize) -> IndexKey {
        let mut digits = [b'0'; 20];
        let mut start = digits.len();
        loop {
            start -= 1;
            digits[start] = b'0' + (index % 10) as u8;
            index /= 10;
            if index == 0 {
                break;
            }
        }
        IndexKey { digits, start }
    }
}

impl std::ops::Deref for IndexKey {
    type Target = str;
    fn deref(&self) -> &str {
        // Only ASCII digits are written.
        std::str::from_utf8(&self.digits[self.start..]).unwrap_or("")
    }
}

/// Reconstructs an [`AssistantMessage`] from wire fragments and emits the matching events.
///
/// Adapters address blocks by their own key (Anthropic's block index, OpenAI's tool-call index,
/// or a fixed key for streamed text); the builder maps keys to content indexes. The message
/// lives behind a mutex shared with the [`AssistantStream`] so a consumer can ask for the
/// partial message; each fragment costs one uncontended lock, except a text or thinking delta
/// joined to the held one ([`MessageBuilder::append_delta`]), which reaches the message when
/// the held delta is sent or the message is next read.
///
/// A consumer rebuilds the message from the events it received with a builder made by
/// [`MessageBuilder::follow`] and fed through [`MessageBuilder::apply`]: the same
/// reconstruction, addressed by content index, sending nothing.
///
/// **Deltas are coalesced at the source.** A text or thinking delta is held until something
/// else is sent or [`MessageBuilder::flush`] is called; the next deltas of the same block join
/// it. Adapters flush before they wait for more bytes (the SSE body does it before each socket
/// read, [`crate::api`]), so every complete event of one read reaches the consumer as one
/// `text_delta` (or `thinking_delta`) per block: nothing waits for later bytes, nothing is
/// reordered, and the joined text is the same (a network read already cuts the text
/// anywhere). Tool-call argument deltas, block starts and ends, usage and terminal events are
/// never merged; each sends the held delta first.
pub struct MessageBuilder {
    /// `None` for a follower (nothing is sent).
    tx: Option<mpsc::Sender<AssistantEvent>>,
    message: Shared,
    rates: ModelCost,
    open: OpenBlocks,
    raw_args: HashMap<usize, String>,
    finished: bool,
    /// The text or thinking delta not sent yet ([`MessageBuilder::flush`]).
    held: Option<Held>,
}

impl Drop for MessageBuilder {
    /// The held delta's text goes into the message (a stream ended without `finish` or
    /// `fail`: its partial has everything that arrived).
    fn drop(&mut self) {
        drop(settled(&self.message, &self.held));
    }
}

/// A producer's text or thinking delta held back so that the next ones of the same block join
/// it (see [`MessageBuilder::flush`]): its content index, whether it is thinking, its text.
///
/// The message's block gets `delta[..applied]` at once and the rest when the message is next
/// locked ([`settled`]): a delta joined by [`MessageBuilder::append_delta`] costs one append,
/// no lock. Every reading of the message goes through [`settled`], and a dropped builder
/// settles too, so the message never lacks text the events carried.
#[derive(Debug)]
struct Held {
    index: usize,
    thinking: bool,
    delta: String,
    /// How much of `delta` the message's block already has, in bytes.
    applied: std::cell::Cell<usize>,
}

/// The message locked, with the held delta's part it lacks appended first (see [`Held`]).
fn settled<'m>(message: &'m Shared, held: &Option<Held>) -> MutexGuard<'m, AssistantMessage> {
    let mut m = lock(message);
    if let Some(h) = held {
        let rest = h.delta.get(h.applied.get()..).unwrap_or("");
        if !rest.is_empty() {
            match m.content.get_mut(h.index) {
                Some(ContentBlock::Text(t)) if !h.thinking => t.text.push_str(rest),
                Some(ContentBlock::Thinking(t)) if h.thinking => t.thinking.push_str(rest),
                _ => {}
            }
            h.applied.set(h.delta.len());
        }
    }
    m
}

impl Held {
    fn into_event(self) -> AssistantEvent {
        if self.thinking {
            AssistantEvent::ThinkingDelta {
                content_index: self.index,
                delta: self.delta,
            }
        } else {
            AssistantEvent::TextDelta {
                content_index: self.index,
                delta: self.delta,
            }
        }
    }
}

impl MessageBuilder {
    /// Starts a response of `model` (its api, provider, id and per-million prices) and emits
    /// `start`.
    pub async fn start(tx: StreamSender, model: &Model) -> Result<Self, Closed> {
        *lock(&tx.partial) =
            AssistantMessage::empty(model.api.as_str(), &model.provider, &model.id);
        let mut b = MessageBuilder {
            tx: Some(tx.tx),
            message: tx.partial,
            rates: model.cost.clone(),
            open: OpenBlocks::default(),
            raw_args: HashMap::new(),
            finished: false,
            held: None,
        };
        b.emit(AssistantEvent::Start).await?;
        Ok(b)
    }

    /// Sends `ev` after the held delta, if any.
    async fn emit(&mut self, ev: AssistantEvent) -> Result<(), Closed> {
        let Some(tx) = &self.tx else {
            return Ok(());
        };
        drop(settled(&self.message, &self.held));
        if let Some(held) = self.held.take() {
            tx.send(held.into_event()).await.map_err(|_| Closed)?;
        }
        tx.send(ev).await.map_err(|_| Closed)
    }

    /// Sends the held text or thinking delta, if any (see the type's doc): adapters call it
    /// before they wait for more bytes. `Err(Closed)` when the consumer went away.
    pub async fn flush(&mut self) -> Result<(), Closed> {
        if self.held.is_some() {
            drop(settled(&self.message, &self.held));
        }
        match (&self.tx, self.held.take()) {
            (Some(tx), Some(held)) => tx.send(held.into_event()).await.map_err(|_| Closed),
            _ => Ok(()),
        }
    }

    /// Holds `delta` of block `index` (joined to the held delta when it is of the same block
    /// and kind, else after sending the held one).
    async fn hold(&mut self, index: usize, thinking: bool, delta: &str) -> Result<(), Closed> {
        if self.tx.is_none() {
            return Ok(());
        }
        if let Some(h) = &mut self.held {
            if h.index == index && h.thinking == thinking {
                // The caller appended `delta` to the message (after what was held).
                h.delta.push_str(delta);
                h.applied.set(h.delta.len());
                return Ok(());
            }
        }
        self.flush().await?;
        self.held = Some(Held {
            index,
            thinking,
            delta: delta.to_string(),
            applied: std::cell::Cell::new(delta.len()),
        });
        Ok(())
    }

    /// A builder that continues `message` (a `message_start`'s empty message, or a partial
    /// message read mid-stream) from the events of its stream, as a consumer receives them
    /// ([`MessageBuilder::apply`]); it sends nothing. Blocks of `message` that streaming
    /// events address are continued in place.
    pub fn follow(message: AssistantMessage, rates: ModelCost) -> MessageBuilder {
        MessageBuilder {
            tx: None,
            message: Arc::new(Mutex::new(message)),
            rates,
            open: OpenBlocks::default(),
            raw_args: HashMap::new(),
            finished: false,
            held: None,
        }
    }

    /// Applies one received event to a follower ([`MessageBuilder::follow`]): starts and
    /// deltas go through the same steps as the producer's (tool arguments parsed partially
    /// while they stream), ends take the block the event carries, and a terminal event's
    /// message replaces the whole. Does nothing on a producing builder.
    pub fn apply(&mut self, ev: &AssistantEvent) {
        if self.tx.is_some() {
            return;
        }
        // The common event first: text or thinking for a block already open here, appended in
        // place (what `text_delta` / `thinking_delta` do to an open block, nothing sent).
        if let AssistantEvent::TextDelta {
            content_index: i,
            delta,
        }
        | AssistantEvent::ThinkingDelta {
            content_index: i,
            delta,
        } = ev
        {
            if let Some(&idx) = self.open.get(&IndexKey::of(*i)) {
                let text = matches!(ev, AssistantEvent::TextDelta { .. });
                match settled(&self.message, &self.held).content.get_mut(idx) {
                    Some(ContentBlock::Text(t)) if text => t.text.push_str(delta),
                    Some(ContentBlock::Thinking(t)) if !text => t.thinking.push_str(delta),
                    _ => {}
                }
                return;
            }
        }
        // A follower has no channel: every step completes on its first poll.
        let _ = futures::FutureExt::now_or_never(self.apply_received(ev));
    }

    async fn apply_received(&mut self, ev: &AssistantEvent) -> Result<(), Closed> {
        let key = |i: &usize| IndexKey::of(*i);
        match ev {
            AssistantEvent::Start => Ok(()),
            AssistantEvent::TextStart { content_index: i } => self.text_delta(&key(i), "").await,
            AssistantEvent::TextDelta {
                content_index: i,
                delta,
            } => {
                self.resume(*i);
                self.text_delta(&key(i), delta).await
            }
            AssistantEvent::ThinkingStart { content_index: i } => {
                self.thinking_delta(&key(i), "").await
            }
            AssistantEvent::ThinkingDelta {
                content_index: i,
                delta,
            } => {
                self.resume(*i);
                self.thinking_delta(&key(i), delta).await
            }
            AssistantEvent::TextEnd {
                content_index: i,
                content,
            }
            | AssistantEvent::ThinkingEnd {
                content_index: i,
                content,
            } => {
                self.resume(*i);
                self.settle_block(&key(i), Some(content.clone()), None);
                self.open.remove(&key(i));
                Ok(())
            }
            AssistantEvent::ToolcallStart {
                content_index: i,
                id,
                name,
            } => self.tool_call_start(&key(i), id, name, None).await,
            AssistantEvent::ToolcallDelta {
                content_index: i,
                delta,
            } => {
                self.resume(*i);
                self.tool_call_delta(&key(i), delta).await
            }
            AssistantEvent::ToolcallEnd {
                content_index: i,
                tool_call,
            } => {
                self.open.remove(&key(i));
                self.raw_args.remove(i);
                if let Some(b) = settled(&self.message, &self.held).content.get_mut(*i) {
                    *b = ContentBlock::ToolCall(tool_call.clone());
                }
                Ok(())
            }
            AssistantEvent::Done { message, .. } | AssistantEvent::Error { error: message, .. } => {
                self.open.clear();
                self.finished = true;
                *settled(&self.message, &self.held) = message.clone();
                Ok(())
            }
        }
    }

    /// Marks the existing block `index` open (a follower that started mid-stream).
    fn resume(&mut self, index: usize) {
        let key = IndexKey::of(index);
        if !self.open.contains_key(&key) && index < settled(&self.message, &self.held).content.len()
        {
            self.open.insert(key.to_string(), index);
        }
    }

    /// Runs `f` on the message reconstructed so far (metadata such as the response id).
    pub fn with_message<R>(&mut self, f: impl FnOnce(&mut AssistantMessage) -> R) -> R {
        f(&mut settled(&self.message, &self.held))
    }

    /// A copy of the message reconstructed so far.
    pub fn snapshot(&self) -> AssistantMessage {
        settled(&self.message, &self.held).clone()
    }

    /// True when a block with this key is open.
    pub fn is_open(&self, key: &str) -> bool {
        self.open.contains_key(key)
    }

    /// Opens block `key` with `block()` unless open (the block is only made when it opens);
    /// returns its content index and whether it was opened now.
    fn open_block(&mut self, key: &str, block: impl FnOnce() -> ContentBlock) -> (usize, bool) {
        if let Some(i) = self.open.get(key) {
            return (*i, false);
        }
        let mut m = settled(&self.message, &self.held);
        let i = m.content.len();
        m.content.push(block());
        drop(m);
        self.open.insert(key.to_string(), i);
        (i, true)
    }

    /// Appends `delta` to the held delta when the held delta is of the open block `key` and of
    /// its kind (text, or thinking when `thinking`; the message's block gets it when the
    /// message is next read, [`Held`]): a stream's common step, which sends nothing, so awaits
    /// nothing, and takes no lock. `false`, with nothing done, in every other case
    /// (the block not open, another block's or kind's delta held, nothing held, a follower);
    /// the caller then calls [`MessageBuilder::text_delta`] or
    /// [`MessageBuilder::thinking_delta`], which call this first themselves. Adapters call it
    /// before those in their per-event loop: an `async` call builds and polls its future for
    /// every delta, this does not.
    pub fn append_delta(&mut self, key: &str, thinking: bool, delta: &str) -> bool {
        let Some(h) = self.held.as_mut() else {
            return false;
        };
        let Some(&idx) = self.open.get(key) else {
            return false;
        };
        if h.index != idx || h.thinking != thinking {
            return false;
        }
        // The message's block gets it when the message is next locked ([`settled`]).
        h.delta.push_str(delta);
        true
    }

    /// Appends text to the block `key`, opening a text block first if needed.
    pub async fn text_delta(&mut self, key: &str, delta: &str) -> Result<(), Closed> {
        if self.append_delta(key, false, delta) {
            return Ok(());
        }
        let (idx, opened) = self.open_block(key, || ContentBlock::text(""));
        if opened {
            self.emit(AssistantEvent::TextStart { content_index: idx })
                .await?;
        }
        if delta.is_empty() {
            return Ok(());
        }
        if let Some(ContentBlock::Text(t)) = settled(&self.message, &self.held).content.get_mut(idx)
        {
            t.text.push_str(delta);
        }
        self.hold(idx, false, delta).await
    }

    /// Appends reasoning text to the block `key`, opening a thinking block first if needed.
    pub async fn thinking_delta(&mut self, key: &str, delta: &str) -> Result<(), Closed> {
        if self.append_delta(key, true, delta) {
            return Ok(());
        }
        let (idx, opened) = self.open_block(key, || {
            ContentBlock::Thinking(ThinkingContent {
                thinking: String::new(),
                thinking_signature: None,
                redacted: false,
            })
        });
        if opened {
            self.emit(AssistantEvent::ThinkingStart { content_index: idx })
                .await?;
        }
        if delta.is_empty() {
            return Ok(());
        }
        if let Some(ContentBlock::Thinking(t)) =
            settled(&self.message, &self.held).content.get_mut(idx)
        {
            t.thinking.push_str(delta);
        }
        self.hold(idx, true, delta).await
    }

    /// Sets or extends the signature of the open thinking block `key`.
    pub fn thinking_signature(&mut self, key: &str, sig: &str) {
        if let Some(idx) = self.open.get(key) {
            if let Some(ContentBlock::Thinking(t)) =
                settled(&self.message, &self.held).content.get_mut(*idx)
            {
                t.thinking_signature
                    .get_or_insert_with(String::new)
                    .push_str(sig);
            }
        }
    }

    /// Marks the open thinking block `key` as redacted (Anthropic `redacted_thinking`), with
    /// Pi's placeholder text.
    pub fn mark_redacted(&mut self, key: &str) {
        if let Some(idx) = self.open.get(key) {
            if let Some(ContentBlock::Thinking(t)) =
                settled(&self.message, &self.held).content.get_mut(*idx)
            {
                t.redacted = true;
                if t.thinking.is_empty() {
                    t.thinking = REDACTED_THINKING_TEXT.to_string();
                }
            }
        }
    }

    /// Opens a tool-call block `key` with its id and name. `initial` is an already complete
    /// argument object (Anthropic's `input`), kept when no argument deltas follow (STRM-11).
    pub async fn tool_call_start(
        &mut self,
        key: &str,
        id: &str,
        name: &str,
        initial: Option<Value>,
    ) -> Result<(), Closed> {
        let arguments = initial
            .filter(Value::is_object)
            .unwrap_or_else(|| Value::Object(Default::default()));
        let (i, _) = self.open_block(key, || {
            ContentBlock::ToolCall(ToolCall::new(id, name, arguments))
        });
        self.emit(AssistantEvent::ToolcallStart {
            content_index: i,
            id: id.to_string(),
            name: name.to_string(),
        })
        .await
    }

    /// Sets the id or name of the tool call `key` when a later fragment first carries it.
    pub fn tool_call_fill(&mut self, key: &str, id: Option<&str>, name: Option<&str>) {
        if let Some(idx) = self.open.get(key) {
            if let Some(ContentBlock::ToolCall(c)) =
                settled(&self.message, &self.held).content.get_mut(*idx)
            {
                if let Some(id) = id.filter(|s| !s.is_empty()) {
                    if c.id.is_empty() {
                        c.id = id.to_string();
                    }
                }
                if let Some(name) = name.filter(|s| !s.is_empty()) {
                    if c.name.is_empty() {
                        c.name = name.to_string();
                    }
                }
            }
        }
    }

    /// Appends argument JSON text to the tool call `key`.
    pub async fn tool_call_delta(&mut self, key: &str, delta: &str) -> Result<(), Closed> {
        let Some(idx) = self.open.get(key).copied() else {
            return Ok(());
        };
        if delta.is_empty() {
            return Ok(());
        }
        let raw = self.raw_args.entry(idx).or_default();
        raw.push_str(delta);
        if raw.len() <= PARTIAL_PARSE_LIMIT {
            let parsed = crate::json::parse_partial_arguments(raw);
            if let Some(ContentBlock::ToolCall(c)) =
                settled(&self.message, &self.held).content.get_mut(idx)
            {
                c.arguments = parsed;
            }
        }
        self.emit(AssistantEvent::ToolcallDelta {
            content_index: idx,
            delta: delta.to_string(),
        })
        .await
    }

    /// Closes block `key`. Streamed tool arguments are parsed once, strictly (after Pi's
    /// string repair); text that does not parse gives replay-safe `{}` arguments and is kept in
    /// `rawArguments` (case LEN-01).
    pub async fn end_block(&mut self, key: &str) -> Result<(), Closed> {
        let Some(idx) = self.open.remove(key) else {
            return Ok(());
        };
        let raw = self.raw_args.get(&idx).filter(|r| !r.trim().is_empty());
        let ev = {
            let mut m = settled(&self.message, &self.held);
            match m.content.get_mut(idx) {
                Some(ContentBlock::Text(t)) => Some(AssistantEvent::TextEnd {
                    content_index: idx,
                    content: t.text.clone(),
                }),
                Some(ContentBlock::Thinking(t)) => Some(AssistantEvent::ThinkingEnd {
                    content_index: idx,
                    content: t.thinking.clone(),
                }),
                Some(ContentBlock::ToolCall(c)) => {
                    if let Some(raw) = raw {
                        match crate::json::parse_arguments(raw) {
                            Some(v) => c.arguments = v,
                            None => {
                                c.arguments = Value::Object(Default::default());
                                c.raw_arguments = Some(raw.clone());
                            }
                        }
                    }
                    Some(AssistantEvent::ToolcallEnd {
                        content_index: idx,
                        tool_call: c.clone(),
                    })
                }
                _ => None,
            }
        };
        match ev {
            Some(ev) => self.emit(ev).await,
            None => Ok(()),
        }
    }

    /// The content index of the open block `key`.
    pub fn content_index(&self, key: &str) -> Option<usize> {
        self.open.get(key).copied()
    }

    /// Replaces the final text of the open text or thinking block `key` and sets its
    /// signature (`textSignature` / `thinkingSignature`), for formats whose `done` event carries
    /// the authoritative item (OpenAI Responses).
    pub fn settle_block(&mut self, key: &str, text: Option<String>, signature: Option<String>) {
        let Some(idx) = self.open.get(key).copied() else {
            return;
        };
        match settled(&self.message, &self.held).content.get_mut(idx) {
            Some(ContentBlock::Text(t)) => {
                if let Some(text) = text {
                    t.text = text;
                }
                if signature.is_some() {
                    t.text_signature = signature;
                }
            }
            Some(ContentBlock::Thinking(t)) => {
                if let Some(text) = text.filter(|s| !s.is_empty()) {
                    t.thinking = text;
                }
                if signature.is_some() {
                    t.thinking_signature = signature;
                }
            }
            _ => {}
        }
    }

    /// The raw streamed argument text of the tool call at `content_index`, if any.
    pub fn raw_arguments(&self, content_index: usize) -> Option<&str> {
        self.raw_args.get(&content_index).map(String::as_str)
    }

    /// True when any tool-call block was opened.
    pub fn has_tool_calls(&self) -> bool {
        settled(&self.message, &self.held)
            .content
            .iter()
            .any(|b| matches!(b, ContentBlock::ToolCall(_)))
    }

    /// True when any text block has text.
    pub fn has_text(&self) -> bool {
        settled(&self.message, &self.held)
            .content
            .iter()
            .any(|b| matches!(b, ContentBlock::Text(t) if !t.text.is_empty()))
    }

    /// True when a block was started and not yet ended. At the end of a body without its end
    /// marker, an open block of a format that ends its blocks (Anthropic's
    /// `content_block_stop`, the Responses `output_item.done`) was cut (case STRM-04).
    pub fn has_open_blocks(&self) -> bool {
        !self.open.0.is_empty()
    }

    /// True when an open tool call has no complete argument object yet: no argument text
    /// streamed, or text that does not parse as one (strictly, after Pi's string repair). At
    /// the end of a body without its end marker such a call was cut (case STRM-04).
    pub fn open_call_unfinished(&self) -> bool {
        let m = settled(&self.message, &self.held);
        self.open.0.iter().any(|&(_, i)| {
            matches!(m.content.get(i), Some(ContentBlock::ToolCall(_)))
                && self
                    .raw_args
                    .get(&i)
                    .filter(|r| !r.trim().is_empty())
                    .and_then(|r| crate::json::parse_arguments(r))
                    .is_none()
        })
    }

    /// Closes every open block in content order.
    pub async fn end_all(&mut self) -> Result<(), Closed> {
        let mut keys: Vec<(usize, String)> =
            self.open.0.iter().map(|(k, v)| (*v, k.clone())).collect();
        keys.sort();
        for (_, k) in keys {
            self.end_block(&k).await?;
        }
        Ok(())
    }

    /// Sets the usage (token counts as the provider reported them), computing `totalTokens`
    /// and the cost from the model's per-million prices.
    pub fn set_usage(&mut self, mut usage: Usage) {
        usage.total_tokens = usage.input + usage.output + usage.cache_read + usage.cache_write;
        usage.cost = crate::models::calculate_cost(&self.rates, &usage);
        settled(&self.message, &self.held).usage = usage;
    }

    /// Closes open blocks and emits `done` with `reason`.
    pub async fn finish(mut self, reason: StopReason) -> Result<AssistantMessage, Closed> {
        self.end_all().await?;
        self.finished = true;
        // The builder is done with the message: take it rather than copy it (the stream's
        // partial view is not read after the terminal event).
        let message = {
            let mut m = settled(&self.message, &self.held);
            m.stop_reason = reason;
            std::mem::replace(&mut *m, AssistantMessage::empty("", "", ""))
        };
        self.emit(AssistantEvent::Done {
            reason,
            message: message.clone(),
        })
        .await?;
        Ok(message)
    }

    /// Emits `error` for `failure` (stop reason `aborted` for an abort, else `error`), keeping
    /// what streamed so far. Open tool calls keep the arguments known at their start.
    pub async fn fail(mut self, failure: ProviderError) -> AssistantMessage {
        // Open blocks are closed silently: the message is terminal either way.
        self.open.clear();
        self.finished = true;
        let reason = failure.stop_reason();
        let message = {
            let mut m = settled(&self.message, &self.held);
            m.stop_reason = reason;
            // An abort in the words Pi 1.6 stores for the message's wire.
            m.error_message = Some(match crate::errors::abort_error_message(&failure, &m.api) {
                Some(words) => words.to_string(),
                None => failure.message(),
            });
            m.clone()
        };
        let _ = self
            .emit(AssistantEvent::Error {
                reason,
                error: message.clone(),
                failure,
            })
            .await;
        message
    }
}

/// Longest argument text re-parsed after every delta, in bytes (each re-parse reads the whole
/// text; longer arguments are parsed only when their block ends).
pub const PARTIAL_PARSE_LIMIT: usize = 256 * 1024;

/// Pi's text of a redacted thinking block (the payload is in the signature).
pub const REDACTED_THINKING_TEXT: &str = "[Reasoning redacted]";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_followers_block_keys_are_the_indexes_decimal_digits() {
        for i in [0, 7, 10, 99, 123_456, usize::MAX] {
            assert_eq!(&*IndexKey::of(i), i.to_string());
        }
        let mut open = OpenBlocks::default();
        open.insert("text".into(), 0);
        open.insert("1".into(), 1);
        open.insert("text".into(), 2);
        assert_eq!(
            (open.get("text"), open.contains_key("1"), open.get("2")),
            (Some(&2), true, None)
        );
        assert_eq!((open.remove("text"), open.remove("text")), (Some(2), None));
        assert_eq!(open.0, vec![("1".to_string(), 1)]);
    }

    #[tokio::test]
    async fn builder_reconstructs_blocks_and_events() {
        let (tx, mut stream) = AssistantStream::channel();
        let task = tokio::spawn(async move {
            let model = Model::new(crate::Api::Scripted, "p", "m", "");
            let mut b = MessageBuilder::start(tx, &model).await.unwrap();
            b.text_delta("t", "Hel").await.unwrap();
            b.text_delta("t", "lo").await.unwrap();
            b.end_block("t").await.unwrap();
            b.tool_call_start("c0", "call_1", "read", None)
                .await
                .unwrap();
            b.tool_call_delta("c0", "{\"pa").await.unwrap();
            b.tool_call_delta("c0", "th\":\"a\"}").await.unwrap();
            b.finish(StopReason::ToolUse).await.unwrap()
        });
        let mut events = Vec::new();
        while let Some(e) = stream.next().await {
            events.push(e);
        }
        let msg = task.await.unwrap();
        assert_eq!(
            msg.content,
            vec![
                ContentBlock::text("Hello"),
                ContentBlock::ToolCall(ToolCall::new(
                    "call_1",
                    "read",
                    serde_json::json!({"path":"a"})
                ))
            ]
        );
        let kinds: Vec<String> = events
            .iter()
            .map(|e| {
                serde_json::to_value(e).unwrap()["type"]
                    .as_str()
                    .unwrap()
                    .to_string()
            })
            .collect();
        // The two text deltas were never flushed apart: one `text_delta` with both; the
        // tool call's argument deltas stay one event each.
        assert_eq!(
            kinds,
            [
                "start",
                "text_start",
                "text_delta",
                "text_end",
                "toolcall_start",
                "toolcall_delta",
                "toolcall_delta",
                "toolcall_end",
                "done"
            ]
        );
        assert_eq!(
            events[2],
            AssistantEvent::TextDelta {
                content_index: 0,
                delta: "Hello".into()
            }
        );
    }

    /// The events of `steps` played on a producing builder, and the final message.
    async fn play(
        steps: Vec<(&'static str, &'static str, &'static str)>,
    ) -> (Vec<AssistantEvent>, AssistantMessage) {
        let (tx, mut stream) = AssistantStream::channel();
        let task = tokio::spawn(async move {
            let model = Model::new(crate::Api::Scripted, "p", "m", "");
            let mut b = MessageBuilder::start(tx, &model).await.unwrap();
            for (op, key, text) in steps {
                match op {
                    "text" => b.text_delta(key, text).await.unwrap(),
                    "thinking" => b.thinking_delta(key, text).await.unwrap(),
                    "call" => b.tool_call_start(key, text, "read", None).await.unwrap(),
                    "args" => b.tool_call_delta(key, text).await.unwrap(),
                    "end" => b.end_block(key).await.unwrap(),
                    "flush" => b.flush().await.unwrap(),
                    other => panic!("{other}"),
                }
            }
            b.finish(StopReason::Stop).await.unwrap()
        });
        let mut events = Vec::new();
        while let Some(e) = stream.next().await {
            events.push(e);
        }
        (events, task.await.unwrap())
    }

    #[tokio::test]
    async fn held_deltas_join_per_block_until_a_flush_or_another_event() {
        let delta = |i: usize, t: &str| AssistantEvent::TextDelta {
            content_index: i,
            delta: t.into(),
        };
        let thinking = |i: usize, t: &str| AssistantEvent::ThinkingDelta {
            content_index: i,
            delta: t.into(),
        };
        let steps = vec![
            ("thinking", "r", "Let "),
            ("thinking", "r", "me"),
            ("text", "t", "A"),
            ("text", "t", "b"),
            ("flush", "", ""),
            ("text", "t", "c"),
            ("thinking", "r", " think"),
            ("text", "t", "d"),
            ("text", "t", "e"),
            ("call", "c", "call_1"),
            ("args", "c", "{\"pa"),
            ("text", "t", "f"),
            ("args", "c", "th\":1}"),
            ("text", "t", "g"),
            ("end", "t", ""),
        ];
        let (events, message) = play(steps).await;
        let start = |i: usize, thinking: bool| {
            if thinking {
                AssistantEvent::ThinkingStart { content_index: i }
            } else {
                AssistantEvent::TextStart { content_index: i }
            }
        };
        assert_eq!(
            events[..events.len() - 1],
            [
                AssistantEvent::Start,
                start(0, true),
                thinking(0, "Let me"),
                start(1, false),
                delta(1, "Ab"),
                delta(1, "c"),
                thinking(0, " think"),
                delta(1, "de"),
                AssistantEvent::ToolcallStart {
                    content_index: 2,
                    id: "call_1".into(),
                    name: "read".into()
                },
                AssistantEvent::ToolcallDelta {
                    content_index: 2,
                    delta: "{\"pa".into()
                },
                delta(1, "f"),
                AssistantEvent::ToolcallDelta {
                    content_index: 2,
                    delta: "th\":1}".into()
                },
                delta(1, "g"),
                AssistantEvent::TextEnd {
                    content_index: 1,
                    content: "Abcdefg".into()
                },
                AssistantEvent::ThinkingEnd {
                    content_index: 0,
                    content: "Let me think".into()
                },
                AssistantEvent::ToolcallEnd {
                    content_index: 2,
                    tool_call: ToolCall::new("call_1", "read", serde_json::json!({"path": 1}))
                },
            ]
        );
        // A follower fed the joined events rebuilds the producer's message.
        let mut follower = MessageBuilder::follow(
            AssistantMessage::empty("scripted", "p", "m"),
            ModelCost::default(),
        );
        for e in &events[..events.len() - 1] {
            follower.apply(e);
        }
        let mut rebuilt = follower.snapshot();
        rebuilt.timestamp = message.timestamp;
        rebuilt.stop_reason = message.stop_reason;
        assert_eq!(rebuilt, message);
    }

    #[tokio::test]
    async fn append_delta_joins_only_the_held_delta_of_its_block_and_kind() {
        let (tx, mut stream) = AssistantStream::channel();
        let model = Model::new(crate::Api::Scripted, "p", "m", "");
        let mut b = MessageBuilder::start(tx, &model).await.unwrap();
        // Nothing open, nothing held: nothing done.
        assert!(!b.append_delta("t", false, "x"));
        b.text_delta("t", "He").await.unwrap();
        // The held delta's block and kind: joined, in the held delta and, when read, the
        // message.
        assert!(b.append_delta("t", false, "ll"));
        assert_eq!(b.snapshot().content, vec![ContentBlock::text("Hell")]);
        assert!(b.append_delta("t", false, ""));
        // Another kind of the same key, a block not open: nothing done.
        assert!(!b.append_delta("t", true, "?"));
        assert!(!b.append_delta("r", true, "?"));
        b.thinking_delta("r", "Hm").await.unwrap();
        // The held delta is now the thinking block's: the text block's delta is not joined.
        assert!(!b.append_delta("t", false, "?"));
        assert!(b.append_delta("r", true, "m"));
        b.text_delta("t", "o").await.unwrap();
        b.flush().await.unwrap();
        // Flushed: nothing held, nothing joined.
        assert!(!b.append_delta("t", false, "?"));
        let message = b.finish(StopReason::Stop).await.unwrap();
        let mut events = Vec::new();
        while let Some(e) = stream.next().await {
            events.push(e);
        }
        assert_eq!(
            events[..6],
            [
                AssistantEvent::Start,
                AssistantEvent::TextStart { content_index: 0 },
                AssistantEvent::TextDelta {
                    content_index: 0,
                    delta: "Hell".into()
                },
                AssistantEvent::ThinkingStart { content_index: 1 },
                AssistantEvent::ThinkingDelta {
                    content_index: 1,
                    delta: "Hmm".into()
                },
                AssistantEvent::TextDelta {
                    content_index: 0,
                    delta: "o".into()
                },
            ]
        );
        assert_eq!(
            message.content,
            vec![
                ContentBlock::text("Hello"),
                ContentBlock::Thinking(ThinkingContent {
                    thinking: "Hmm".into(),
                    thinking_signature: None,
                    redacted: false,
                }),
            ]
        );
        // A follower holds nothing: it never joins (it rebuilds through `apply`).
        let mut follower = MessageBuilder::follow(
            AssistantMessage::empty("scripted", "p", "m"),
            ModelCost::default(),
        );
        follower.apply(&AssistantEvent::TextStart { content_index: 0 });
        assert!(!follower.append_delta("0", false, "x"));
    }

    #[tokio::test]
    async fn a_builder_dropped_with_a_held_delta_leaves_it_in_the_partial() {
        let (tx, stream) = AssistantStream::channel();
        let model = Model::new(crate::Api::Scripted, "p", "m", "");
        let mut b = MessageBuilder::start(tx, &model).await.unwrap();
        b.text_delta("t", "par").await.unwrap();
        assert!(b.append_delta("t", false, "tial"));
        drop(b);
        assert_eq!(
            stream.partial().content,
            vec![ContentBlock::text("partial")]
        );
    }

    #[tokio::test]
    async fn a_failure_sends_the_held_delta_before_the_error() {
        let (tx, mut stream) = AssistantStream::channel();
        let model = Model::new(crate::Api::Scripted, "p", "m", "");
        let mut b = MessageBuilder::start(tx, &model).await.unwrap();
        b.text_delta("t", "par").await.unwrap();
        b.text_delta("t", "tial").await.unwrap();
        let message = b.fail(ProviderError::Aborted).await;
        let mut events = Vec::new();
        while let Some(e) = stream.next().await {
            events.push(e);
        }
        assert_eq!(
            events[..3],
            [
                AssistantEvent::Start,
                AssistantEvent::TextStart { content_index: 0 },
                AssistantEvent::TextDelta {
                    content_index: 0,
                    delta: "partial".into()
                },
            ]
        );
        assert_eq!(events.len(), 4);
        assert_eq!(message.content, vec![ContentBlock::text("partial")]);
        assert_eq!(message.stop_reason, StopReason::Aborted);
    }

    #[test]
    fn error_event_serializes_without_the_typed_failure() {
        let mut m = AssistantMessage::empty("a", "p", "m");
        m.timestamp = 0;
        m.stop_reason = StopReason::Error;
        m.error_message = Some("HTTP 429: slow down".into());
        let ev = AssistantEvent::Error {
            reason: StopReason::Error,
            error: m,
            failure: crate::errors::classify_http(429, None, Some("1"), "slow down"),
        };
        let v = serde_json::to_value(&ev).unwrap();
        assert_eq!(v["type"], "error");
        assert_eq!(v["reason"], "error");
        assert!(v.get("failure").is_none());
        assert_eq!(
            ev.failure().and_then(|f| f.retry_after()),
            Some(std::time::Duration::from_secs(1))
        );
    }

    #[tokio::test]
    async fn vanished_producer_yields_one_error() {
        let (tx, mut stream) = AssistantStream::channel();
        drop(tx);
        let ev = stream.next().await.unwrap();
        assert!(matches!(
            ev,
            AssistantEvent::Error {
                reason: StopReason::Error,
                ..
            }
        ));
        assert!(stream.next().await.is_none());
    }
}

//! The assistant event stream: progress events, then exactly one terminal `done` or `error`.
//!
//! Seed §2 "Streaming has two outputs": progress events for rendering (here with the newest
//! fragment only, `delta`), and a terminal event carrying the canonical [`AssistantMessage`].
//! The adapter, not the consumer, reconstructs the message: [`MessageBuilder`] is the one place
//! that turns wire fragments into blocks, and every adapter drives it.
//!
//! Failures are encoded in the stream (an `error` event whose message has `stopReason` `error` or
//! `aborted`), never returned as `Err`. A consumer that drops the [`AssistantStream`] closes the
//! channel; the producing task notices on its next send and drops the HTTP body.

use std::collections::HashMap;

use serde::Serialize;
use serde_json::Value;
use tokio::sync::mpsc;

use crate::types::{
    AssistantMessage, ContentBlock, StopReason, TextContent, ThinkingContent, ToolCall, Usage,
};

/// One progress or terminal event of an assistant stream (Pi's `AssistantMessageEvent`, without
/// the accumulated `partial`: deltas carry only the newest fragment).
#[derive(Debug, Clone, PartialEq, Serialize)]
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
    Error {
        reason: StopReason,
        error: AssistantMessage,
    },
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
}

/// The receiving end of one model response.
#[derive(Debug)]
pub struct AssistantStream {
    rx: mpsc::Receiver<AssistantEvent>,
    finished: bool,
}

impl AssistantStream {
    /// A connected pair: the sender goes to the producing adapter task.
    pub fn channel() -> (mpsc::Sender<AssistantEvent>, AssistantStream) {
        let (tx, rx) = mpsc::channel(256);
        (
            tx,
            AssistantStream {
                rx,
                finished: false,
            },
        )
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
                let mut m = AssistantMessage::empty("", "", "");
                m.stop_reason = StopReason::Error;
                m.error_message = Some("model stream ended without a result".into());
                Some(AssistantEvent::Error {
                    reason: StopReason::Error,
                    error: m,
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

/// Reconstructs an [`AssistantMessage`] from wire fragments and emits the matching events.
///
/// Adapters address blocks by their own key (Anthropic's block index, OpenAI's tool-call index,
/// or a fixed key for streamed text); the builder maps keys to content indexes.
pub struct MessageBuilder {
    tx: mpsc::Sender<AssistantEvent>,
    message: AssistantMessage,
    open: HashMap<String, usize>,
    raw_args: HashMap<usize, String>,
    finished: bool,
}

impl MessageBuilder {
    /// Starts a response for `api` / `provider` / `model` and emits `start`.
    pub async fn start(
        tx: mpsc::Sender<AssistantEvent>,
        api: &str,
        provider: &str,
        model: &str,
    ) -> Result<Self, Closed> {
        let b = MessageBuilder {
            tx,
            message: AssistantMessage::empty(api, provider, model),
            open: HashMap::new(),
            raw_args: HashMap::new(),
            finished: false,
        };
        b.emit(AssistantEvent::Start).await?;
        Ok(b)
    }

    async fn emit(&self, ev: AssistantEvent) -> Result<(), Closed> {
        self.tx.send(ev).await.map_err(|_| Closed)
    }

    /// The message reconstructed so far.
    pub fn partial(&self) -> &AssistantMessage {
        &self.message
    }

    /// Mutable access for usage, response id and similar metadata.
    pub fn message_mut(&mut self) -> &mut AssistantMessage {
        &mut self.message
    }

    /// True when a block with this key is open.
    pub fn is_open(&self, key: &str) -> bool {
        self.open.contains_key(key)
    }

    /// Appends text to the block `key`, opening a text block first if needed.
    pub async fn text_delta(&mut self, key: &str, delta: &str) -> Result<(), Closed> {
        let idx = match self.open.get(key) {
            Some(i) => *i,
            None => {
                let i = self.message.content.len();
                self.message.content.push(ContentBlock::Text(TextContent {
                    text: String::new(),
                    text_signature: None,
                }));
                self.open.insert(key.to_string(), i);
                self.emit(AssistantEvent::TextStart { content_index: i })
                    .await?;
                i
            }
        };
        if delta.is_empty() {
            return Ok(());
        }
        if let Some(ContentBlock::Text(t)) = self.message.content.get_mut(idx) {
            t.text.push_str(delta);
        }
        self.emit(AssistantEvent::TextDelta {
            content_index: idx,
            delta: delta.to_string(),
        })
        .await
    }

    /// Appends reasoning text to the block `key`, opening a thinking block first if needed.
    pub async fn thinking_delta(&mut self, key: &str, delta: &str) -> Result<(), Closed> {
        let idx = match self.open.get(key) {
            Some(i) => *i,
            None => {
                let i = self.message.content.len();
                self.message
                    .content
                    .push(ContentBlock::Thinking(ThinkingContent {
                        thinking: String::new(),
                        thinking_signature: None,
                        redacted: false,
                    }));
                self.open.insert(key.to_string(), i);
                self.emit(AssistantEvent::ThinkingStart { content_index: i })
                    .await?;
                i
            }
        };
        if delta.is_empty() {
            return Ok(());
        }
        if let Some(ContentBlock::Thinking(t)) = self.message.content.get_mut(idx) {
            t.thinking.push_str(delta);
        }
        self.emit(AssistantEvent::ThinkingDelta {
            content_index: idx,
            delta: delta.to_string(),
        })
        .await
    }

    /// Sets or extends the signature of the open thinking block `key`.
    pub fn thinking_signature(&mut self, key: &str, sig: &str) {
        if let Some(idx) = self.open.get(key) {
            if let Some(ContentBlock::Thinking(t)) = self.message.content.get_mut(*idx) {
                t.thinking_signature
                    .get_or_insert_with(String::new)
                    .push_str(sig);
            }
        }
    }

    /// Marks the open thinking block `key` as redacted (Anthropic `redacted_thinking`).
    pub fn mark_redacted(&mut self, key: &str) {
        if let Some(idx) = self.open.get(key) {
            if let Some(ContentBlock::Thinking(t)) = self.message.content.get_mut(*idx) {
                t.redacted = true;
            }
        }
    }

    /// Opens a tool-call block `key` with its id and name. `initial` is an already complete
    /// argument object (Anthropic's `input`), used when no argument deltas follow.
    pub async fn tool_call_start(
        &mut self,
        key: &str,
        id: &str,
        name: &str,
        initial: Option<Value>,
    ) -> Result<(), Closed> {
        let i = self.message.content.len();
        self.message.content.push(ContentBlock::ToolCall(ToolCall {
            id: id.to_string(),
            name: name.to_string(),
            arguments: initial.unwrap_or_else(|| Value::Object(Default::default())),
        }));
        self.open.insert(key.to_string(), i);
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
            if let Some(ContentBlock::ToolCall(c)) = self.message.content.get_mut(*idx) {
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
        self.raw_args.entry(idx).or_default().push_str(delta);
        self.emit(AssistantEvent::ToolcallDelta {
            content_index: idx,
            delta: delta.to_string(),
        })
        .await
    }

    /// Closes block `key`, parsing streamed tool arguments once (unparsable text gives `{}`).
    pub async fn end_block(&mut self, key: &str) -> Result<(), Closed> {
        let Some(idx) = self.open.remove(key) else {
            return Ok(());
        };
        let ev = match self.message.content.get_mut(idx) {
            Some(ContentBlock::Text(t)) => AssistantEvent::TextEnd {
                content_index: idx,
                content: t.text.clone(),
            },
            Some(ContentBlock::Thinking(t)) => AssistantEvent::ThinkingEnd {
                content_index: idx,
                content: t.thinking.clone(),
            },
            Some(ContentBlock::ToolCall(c)) => {
                if let Some(raw) = self.raw_args.get(&idx).filter(|r| !r.trim().is_empty()) {
                    c.arguments = serde_json::from_str(raw)
                        .unwrap_or_else(|_| Value::Object(Default::default()));
                }
                AssistantEvent::ToolcallEnd {
                    content_index: idx,
                    tool_call: c.clone(),
                }
            }
            _ => return Ok(()),
        };
        self.emit(ev).await
    }

    /// The raw streamed argument text of the tool call at `content_index`, if any.
    pub fn raw_arguments(&self, content_index: usize) -> Option<&str> {
        self.raw_args.get(&content_index).map(String::as_str)
    }

    /// Closes every open block in content order.
    pub async fn end_all(&mut self) -> Result<(), Closed> {
        let mut keys: Vec<(usize, String)> =
            self.open.iter().map(|(k, v)| (*v, k.clone())).collect();
        keys.sort();
        for (_, k) in keys {
            self.end_block(&k).await?;
        }
        Ok(())
    }

    /// Sets the usage, computing `totalTokens`.
    pub fn set_usage(&mut self, mut usage: Usage) {
        usage.total_tokens = usage.input + usage.output + usage.cache_read + usage.cache_write;
        self.message.usage = usage;
    }

    /// Closes open blocks and emits `done` with `reason`.
    pub async fn finish(mut self, reason: StopReason) -> Result<AssistantMessage, Closed> {
        self.end_all().await?;
        self.finished = true;
        self.message.stop_reason = reason;
        let message = self.message.clone();
        self.emit(AssistantEvent::Done {
            reason,
            message: message.clone(),
        })
        .await?;
        Ok(message)
    }

    /// Emits `error` with `reason` (error or aborted), keeping what streamed so far.
    pub async fn fail(mut self, reason: StopReason, error_message: String) -> AssistantMessage {
        // Open blocks are closed silently: the message is terminal either way.
        self.open.clear();
        self.finished = true;
        self.message.stop_reason = reason;
        self.message.error_message = Some(error_message);
        let message = self.message.clone();
        let _ = self
            .emit(AssistantEvent::Error {
                reason,
                error: message.clone(),
            })
            .await;
        message
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn builder_reconstructs_blocks_and_events() {
        let (tx, mut stream) = AssistantStream::channel();
        let task = tokio::spawn(async move {
            let mut b = MessageBuilder::start(tx, "x", "p", "m").await.unwrap();
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
                ContentBlock::ToolCall(ToolCall {
                    id: "call_1".into(),
                    name: "read".into(),
                    arguments: serde_json::json!({"path":"a"})
                })
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
        assert_eq!(
            kinds,
            [
                "start",
                "text_start",
                "text_delta",
                "text_delta",
                "text_end",
                "toolcall_start",
                "toolcall_delta",
                "toolcall_delta",
                "toolcall_end",
                "done"
            ]
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

//! [`Follower`]: the streamed assistant message as the events sent so far build it, with a
//! tool call's argument deltas applied only when the message is read.
//!
//! A [`MessageBuilder::follow`]er parses a tool call's arguments partially at every
//! `toolcall_delta` (as the producer does), and the call's `toolcall_end` then replaces the
//! block with the call's final arguments: the parses in between are read only by whoever
//! reads the message while the call streams. The agent's streaming slot and the LSP sink's
//! record of what a client was sent each follow every answer, and are read rarely (a client's
//! `agent/messages` or `agent/state` mid-stream); a [`Follower`] keeps the deltas of a call
//! until the message is read or the call ends (then they are dropped: the end replaces them),
//! and applies everything else in order. What [`Follower::snapshot`] gives is what the plain
//! builder given the same events gives.

use pi_ai::models::ModelCost;
use pi_ai::stream::MessageBuilder;
use pi_ai::{AssistantEvent, AssistantMessage};

/// A [`MessageBuilder::follow`]er whose tool-call argument deltas wait to be read; see the
/// module doc.
pub struct Follower {
    builder: MessageBuilder,
    /// `toolcall_delta` events received and not applied yet, in order.
    deltas: Vec<AssistantEvent>,
}

impl Follower {
    /// Follows `message` (a `message_start`'s message) with the model's cost `rates`, as
    /// [`MessageBuilder::follow`].
    pub fn new(message: AssistantMessage, rates: ModelCost) -> Follower {
        Follower {
            builder: MessageBuilder::follow(message, rates),
            deltas: Vec::new(),
        }
    }

    /// Applies one received event ([`MessageBuilder::apply`]): a `toolcall_delta` waits, a
    /// `toolcall_end` drops the waiting deltas of its block, anything else first applies the
    /// waiting ones.
    pub fn apply(&mut self, ev: &AssistantEvent) {
        match ev {
            AssistantEvent::ToolcallDelta { .. } => {
                self.deltas.push(ev.clone());
                return;
            }
            AssistantEvent::ToolcallEnd {
                content_index: end, ..
            } => self.deltas.retain(|d| {
                !matches!(d, AssistantEvent::ToolcallDelta { content_index, .. } if content_index == end)
            }),
            _ => {}
        }
        self.settle();
        self.builder.apply(ev);
    }

    /// The message as the events applied so far build it ([`MessageBuilder::snapshot`]).
    pub fn snapshot(&mut self) -> AssistantMessage {
        self.settle();
        self.builder.snapshot()
    }

    /// Applies the waiting deltas.
    fn settle(&mut self) {
        for d in self.deltas.drain(..) {
            self.builder.apply(&d);
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use pi_ai::{ContentBlock, ToolCall};
    use serde_json::json;

    fn call(id: &str, arguments: serde_json::Value) -> ToolCall {
        serde_json::from_value(json!({"type": "toolCall", "id": id, "name": "read",
            "arguments": arguments}))
        .unwrap()
    }

    /// Two tool calls streaming interleaved with text (one call ended, one cut off by the
    /// stream's end): read after every event, and read only at the end, the follower's message
    /// equals the plain builder's, whole, at every step.
    #[test]
    fn a_follower_reads_as_the_plain_builder() {
        let start = AssistantMessage::empty("openai-completions", "mock", "m");
        let mut done = start.clone();
        done.content = vec![ContentBlock::ToolCall(call("c1", json!({"path": "a.txt"})))];
        let events = vec![
            AssistantEvent::TextStart { content_index: 0 },
            AssistantEvent::TextDelta {
                content_index: 0,
                delta: "reading".into(),
            },
            AssistantEvent::ToolcallStart {
                content_index: 1,
                id: "c1".into(),
                name: "read".into(),
            },
            AssistantEvent::ToolcallDelta {
                content_index: 1,
                delta: "{\"pa".into(),
            },
            AssistantEvent::ToolcallStart {
                content_index: 2,
                id: "c2".into(),
                name: "read".into(),
            },
            AssistantEvent::ToolcallDelta {
                content_index: 2,
                delta: "{\"path\": \"b".into(),
            },
            AssistantEvent::ToolcallDelta {
                content_index: 1,
                delta: "th\": \"a.txt\"".into(),
            },
            AssistantEvent::TextDelta {
                content_index: 0,
                delta: " two".into(),
            },
            AssistantEvent::ToolcallEnd {
                content_index: 1,
                tool_call: call("c1", json!({"path": "a.txt"})),
            },
            AssistantEvent::ToolcallDelta {
                content_index: 2,
                delta: ".txt\"}".into(),
            },
            AssistantEvent::Done {
                reason: pi_ai::StopReason::ToolUse,
                message: done,
            },
        ];
        let rates = ModelCost::default();
        let mut plain = MessageBuilder::follow(start.clone(), rates.clone());
        let mut read_often = Follower::new(start.clone(), rates.clone());
        let mut read_last = Follower::new(start, rates);
        for (i, ev) in events.iter().enumerate() {
            plain.apply(ev);
            read_often.apply(ev);
            read_last.apply(ev);
            assert_eq!(read_often.snapshot(), plain.snapshot(), "after event {i}");
        }
        assert_eq!(read_last.snapshot(), plain.snapshot());
    }
}

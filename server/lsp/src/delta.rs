//! The compact delta form, for clients that ask for it (`initializationOptions.compactDeltas:
//! true`; docs/protocol.md "Compact deltas").
//!
//! Such a client gets every `agent/event` of a session with one more member, `ref`: a small
//! integer naming the session on this connection (1, 2, 3… in the order the server opened
//! the sessions). A streamed delta (`message_update` with `text_delta`, `thinking_delta` or
//! `toolcall_delta`) then goes out as the notification `agent/delta` with positional params
//! `[ref, seq, contentIndex, delta]` instead, when the client can rebuild the full event from
//! what it was already sent:
//! - the delta's run is the run of the session's last full `agent/event` (its `runId`);
//! - the block at `contentIndex` was begun by a `text_start` / `thinking_start` /
//!   `toolcall_start` of the kind of the delta, sent since the session's last `message_start`.
//!
//! The client rebuilds `{sessionId, runId, seq, event: {type: "message_update",
//! assistantMessageEvent: {type, contentIndex, delta}}}` with `sessionId` and `runId` of the
//! last full event that carried `ref`, and `type` the delta kind of the block's `*_start`
//! (`text_start` → `text_delta`, …). Otherwise the delta goes out as a full `agent/event`.
//! `seq` is the same number the full event would have had, so `agent/messages`'s rule is
//! unchanged; coalescing ([`crate::sink`]) happens before: a coalesced delta is encoded once.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use pi_ai::AssistantEvent;
use pi_core::agent::AgentEvent;
use serde::{Deserialize, Serialize};
use tower_lsp_server::ls_types::notification::Notification;

use crate::protocol::{AgentEventNotification, AgentEventParams};

/// `agent/delta` params: `[ref, seq, contentIndex, delta]` (a JSON array).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentDeltaParams(pub u64, pub u64, pub usize, pub String);

/// The `agent/delta` notification (server → client; only with `compactDeltas`).
#[derive(Debug)]
pub enum AgentDeltaNotification {}

impl Notification for AgentDeltaNotification {
    type Params = AgentDeltaParams;
    const METHOD: &'static str = "agent/delta";
}

/// `agent/event` params with the session's `ref` (sent instead of [`AgentEventParams`] to a
/// client that asked for compact deltas).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentEventRefParams {
    #[serde(flatten)]
    pub params: AgentEventParams,
    /// The session's handle on this connection, as `agent/delta` names it.
    #[serde(rename = "ref")]
    pub session_ref: u64,
}

/// `agent/event` with `ref` (same method as [`crate::protocol::AgentEventNotification`]).
#[derive(Debug)]
pub enum AgentEventRefNotification {}

impl Notification for AgentEventRefNotification {
    type Params = AgentEventRefParams;
    const METHOD: &'static str = "agent/event";
}

/// `initializationOptions.compactDeltas`: `Ok(false)` when absent or `null`; anything but a
/// boolean is an error naming the field.
pub(crate) fn compact_option(options: Option<&serde_json::Value>) -> Result<bool, String> {
    match options
        .and_then(|o| o.get("compactDeltas"))
        .filter(|v| !v.is_null())
    {
        None => Ok(false),
        Some(serde_json::Value::Bool(b)) => Ok(*b),
        Some(v) => Err(format!(
            "initializationOptions.compactDeltas: expected true or false, got {v}"
        )),
    }
}

/// What the server keeps for compact deltas (in [`crate::state::State`]).
#[derive(Debug, Default)]
pub(crate) struct CompactDeltas {
    /// The client asked for them.
    on: AtomicBool,
    /// The last `ref` given to a session (0: none yet).
    last_ref: AtomicU64,
}

impl CompactDeltas {
    /// Sets `initializationOptions.compactDeltas`.
    pub(crate) fn set(&self, on: bool) {
        self.on.store(on, Ordering::Relaxed);
    }
}

impl CompactDeltas {
    /// The encoder of a new session's sink: `None` unless the client asked for compact
    /// deltas; each call gives the next `ref`.
    pub(crate) fn encoder(&self) -> Option<DeltaEncoder> {
        self.on.load(Ordering::Relaxed).then(|| DeltaEncoder {
            session_ref: self.last_ref.fetch_add(1, Ordering::Relaxed) + 1,
            run_id: None,
            kinds: Vec::new(),
        })
    }
}

/// The delta a `message_update` carries: `(kind, content index, delta)`, kind 0 text,
/// 1 thinking, 2 tool-call arguments.
pub(crate) fn delta_of(event: &mut AgentEvent) -> Option<(u8, usize, &mut String)> {
    match event {
        AgentEvent::MessageUpdate {
            assistant_message_event: e,
        } => match e {
            AssistantEvent::TextDelta {
                content_index,
                delta,
            } => Some((0, *content_index, delta)),
            AssistantEvent::ThinkingDelta {
                content_index,
                delta,
            } => Some((1, *content_index, delta)),
            AssistantEvent::ToolcallDelta {
                content_index,
                delta,
            } => Some((2, *content_index, delta)),
            _ => None,
        },
        _ => None,
    }
}

/// The kind of delta a block takes: 0 text, 1 thinking, 2 tool-call arguments.
type Kind = u8;

/// One session's encoder: what the client was told in full (the last full event's run, the
/// kind of each block begun in the message being streamed).
#[derive(Debug)]
pub(crate) struct DeltaEncoder {
    session_ref: u64,
    run_id: Option<String>,
    kinds: Vec<Option<Kind>>,
}

/// How one event goes out.
// Made and sent at once, never stored: a box would only add an allocation per event.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Encoded {
    /// As `agent/delta`.
    Compact(AgentDeltaParams),
    /// As `agent/event` with `ref`.
    Full(AgentEventRefParams),
}

/// How one event goes out, from its parts ([`DeltaEncoder::compact`]).
// Made and used at once, never stored: a box would only add an allocation per event.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Compacted {
    /// As `agent/delta` with these params.
    Delta(AgentDeltaParams),
    /// As `agent/event` with `ref` (the second member).
    Full(AgentEvent, u64),
}

impl DeltaEncoder {
    /// Encodes the session's next event (`params`, numbered), in the order they go out.
    pub(crate) fn encode(&mut self, params: AgentEventParams) -> Encoded {
        let AgentEventParams {
            session_id,
            run_id,
            seq,
            event,
            unsaved,
        } = params;
        match self.compact(&run_id, seq, event) {
            Compacted::Delta(p) => Encoded::Compact(p),
            Compacted::Full(event, session_ref) => Encoded::Full(AgentEventRefParams {
                params: AgentEventParams {
                    session_id,
                    run_id,
                    seq,
                    event,
                    unsaved,
                },
                session_ref,
            }),
        }
    }

    /// Encodes the session's next event (`event` of run `run_id`, numbered `seq`), in the
    /// order they go out: the `agent/delta` params when the client can rebuild it, else the
    /// event back with the `ref` its full `agent/event` carries (noted as sent in full,
    /// [`DeltaEncoder::full`]).
    pub(crate) fn compact(&mut self, run_id: &str, seq: u64, mut event: AgentEvent) -> Compacted {
        let same_run = self.run_id.as_deref() == Some(run_id);
        if let Some((kind, index, delta)) = delta_of(&mut event) {
            if same_run && self.kinds.get(index).copied().flatten() == Some(kind) {
                return Compacted::Delta(AgentDeltaParams(
                    self.session_ref,
                    seq,
                    index,
                    std::mem::take(delta),
                ));
            }
        }
        if let AgentEvent::MessageUpdate {
            assistant_message_event: e,
        } = &event
        {
            let begun = match e {
                AssistantEvent::TextStart { content_index } => Some((0, *content_index)),
                AssistantEvent::ThinkingStart { content_index } => Some((1, *content_index)),
                AssistantEvent::ToolcallStart { content_index, .. } => Some((2, *content_index)),
                _ => None,
            };
            if let Some((kind, index)) = begun {
                if self.kinds.len() <= index {
                    self.kinds.resize(index + 1, None);
                }
                self.kinds[index] = Some(kind);
            }
        }
        let session_ref = self.full(run_id, &event);
        Compacted::Full(event, session_ref)
    }

    /// Notes that `event` of run `run_id` goes out as a full `agent/event` (a `message_start`
    /// begins a new message: no block of it begun yet); returns the session's `ref` it
    /// carries. Called by [`DeltaEncoder::compact`], and for the frames the sink writes itself
    /// ([`crate::event_json::Repeats`], never a delta).
    pub(crate) fn full(&mut self, run_id: &str, event: &AgentEvent) -> u64 {
        if matches!(event, AgentEvent::MessageStart { .. }) {
            self.kinds.clear();
        }
        if self.run_id.as_deref() != Some(run_id) {
            self.run_id = Some(run_id.to_string());
        }
        self.session_ref
    }
}

/// Sends one numbered event of a session: as it is without an encoder (the client did not
/// ask for compact deltas), else as the encoder says.
pub(crate) async fn send(
    client: &tower_lsp_server::Client,
    outside: &crate::transport::Outside,
    encoder: Option<&mut DeltaEncoder>,
    params: AgentEventParams,
) {
    let Some(encoder) = encoder else {
        return outside.send::<AgentEventNotification>(client, params).await;
    };
    match encoder.encode(params) {
        Encoded::Compact(p) => outside.send::<AgentDeltaNotification>(client, p).await,
        Encoded::Full(p) => outside.send::<AgentEventRefNotification>(client, p).await,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn params(run: &str, seq: u64, event: AgentEvent) -> AgentEventParams {
        AgentEventParams {
            session_id: "s".into(),
            run_id: run.into(),
            seq,
            event,
            unsaved: false,
        }
    }

    fn update(e: AssistantEvent) -> AgentEvent {
        AgentEvent::MessageUpdate {
            assistant_message_event: e,
        }
    }

    /// The wire form of each case, whole: compact only after the block's start of the same
    /// kind in the same run; a full event carries `ref`.
    #[test]
    fn compact_only_when_the_client_can_rebuild() {
        let mut enc = DeltaEncoder {
            session_ref: 3,
            run_id: None,
            kinds: Vec::new(),
        };
        let wire = |e: Encoded| match e {
            Encoded::Compact(p) => serde_json::to_value(p).unwrap(),
            Encoded::Full(p) => serde_json::to_value(p).unwrap(),
        };
        let text = |i, d: &str| {
            update(AssistantEvent::TextDelta {
                content_index: i,
                delta: d.into(),
            })
        };
        // No start seen yet: full, with ref.
        assert_eq!(
            wire(enc.encode(params("r", 1, text(0, "a")))),
            serde_json::json!({"sessionId": "s", "runId": "r", "seq": 1, "ref": 3,
                "event": {"type": "message_update",
                    "assistantMessageEvent": {"type": "text_delta", "contentIndex": 0, "delta": "a"}}})
        );
        enc.encode(params(
            "r",
            2,
            update(AssistantEvent::TextStart { content_index: 0 }),
        ));
        assert_eq!(
            wire(enc.encode(params("r", 3, text(0, "b\"")))),
            serde_json::json!([3, 3, 0, "b\""])
        );
        // A thinking delta at a text block's index: full.
        let thinking = update(AssistantEvent::ThinkingDelta {
            content_index: 0,
            delta: "t".into(),
        });
        assert!(matches!(
            enc.encode(params("r", 4, thinking)),
            Encoded::Full(_)
        ));
        // Another run than the last full event's: full; then compact again in that run.
        assert!(matches!(
            enc.encode(params("r2", 5, text(0, "c"))),
            Encoded::Full(_)
        ));
        assert_eq!(
            wire(enc.encode(params("r2", 6, text(0, "d")))),
            serde_json::json!([3, 6, 0, "d"])
        );
        // A new message forgets the blocks.
        enc.encode(params(
            "r2",
            7,
            AgentEvent::MessageStart {
                message: std::sync::Arc::new(pi_ai::Message::User(pi_ai::types::UserMessage {
                    content: pi_ai::types::UserContent::Text("x".into()),
                    timestamp: 0,
                })),
            },
        ));
        assert!(matches!(
            enc.encode(params("r2", 8, text(0, "e"))),
            Encoded::Full(_)
        ));
    }

    fn fixture(name: &str) -> serde_json::Value {
        let p = format!(
            "{}/../../fixtures/protocol/{name}",
            env!("CARGO_MANIFEST_DIR")
        );
        serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
    }

    /// The examples in fixtures/protocol/: the `text_start` with `ref` and the delta after it
    /// (`agent-delta`), which stands for `agent-event.notification.json`'s event.
    #[test]
    fn examples_round_trip_and_expand_to_the_full_event() {
        let start = fixture("agent-event.ref.notification.json");
        let delta = fixture("agent-delta.notification.json");
        let full = fixture("agent-event.notification.json");
        assert_eq!(start["method"], AgentEventRefNotification::METHOD);
        assert_eq!(delta["method"], AgentDeltaNotification::METHOD);
        let start_params: AgentEventRefParams =
            serde_json::from_value(start["params"].clone()).unwrap();
        assert_eq!(
            serde_json::to_value(&start_params).unwrap(),
            start["params"]
        );
        let full_params: AgentEventParams = serde_json::from_value(full["params"].clone()).unwrap();
        let mut enc = DeltaEncoder {
            session_ref: 1,
            run_id: None,
            kinds: Vec::new(),
        };
        assert!(matches!(enc.encode(start_params.params), Encoded::Full(_)));
        match enc.encode(full_params) {
            Encoded::Compact(p) => {
                assert_eq!(serde_json::to_value(&p).unwrap(), delta["params"]);
                let back: AgentDeltaParams =
                    serde_json::from_value(delta["params"].clone()).unwrap();
                assert_eq!(back, p);
            }
            Encoded::Full(p) => panic!("sent in full: {p:?}"),
        }
    }

    #[test]
    fn option_is_a_boolean() {
        assert_eq!(compact_option(None), Ok(false));
        assert_eq!(
            compact_option(Some(&serde_json::json!({"compactDeltas": true}))),
            Ok(true)
        );
        assert_eq!(
            compact_option(Some(&serde_json::json!({"compactDeltas": null}))),
            Ok(false)
        );
        assert_eq!(
            compact_option(Some(&serde_json::json!({"compactDeltas": 1}))),
            Err("initializationOptions.compactDeltas: expected true or false, got 1".into())
        );
    }
}

//! The `agent/event` frames of the events that repeat a message, each message serialised once.
//!
//! A run sends its messages several times: a tool result's `message_start` and `message_end`
//! carry the same message, `turn_end` carries the assistant message of the turn's
//! `message_end` and its tool results again, and `agent_end` every message of the run
//! (docs/protocol.md). [`Repeats`] keeps the JSON of each message the run sent (with the
//! message, to know it again) and writes the frames of `message_start`, `message_end`,
//! `turn_end` and `agent_end` from those bytes: a message equal to one already sent is
//! compared, not serialised again. The frame is byte for byte what serialising
//! [`AgentEventParams`] (or [`crate::delta::AgentEventRefParams`]) gives: the members in the
//! same order, each value serialised by `serde_json` as the derived serialisation does.
//!
//! [`AgentEventParams`]: crate::protocol::AgentEventParams

use std::sync::Arc;

use pi_ai::{AssistantMessage, Message, ToolResultMessage};
use pi_core::agent::AgentEvent;
use pi_core::session::MessageJson;
use tower_lsp_server::ls_types::notification::Notification;

use crate::protocol::AgentEventNotification;

/// How a tool result serialised as a [`Message`] begins (its tag, written first by serde's
/// internally tagged serialisation), in `turn_end`'s `toolResults` too.
const TOOL_RESULT_TAG: &[u8] = b"{\"role\":\"toolResult\",";

/// The most bytes of message JSON kept across a run's turns for its `agent_end` (4 MiB): a run
/// whose messages hold more keeps only the current turn's, and its `agent_end` serialises the
/// rest again.
const RUN_BYTES: usize = 4 << 20;

/// The start of the body of every `agent/event` frame of one session's run, serialised once
/// for the run:
/// `{"jsonrpc":"2.0","method":"agent/event","params":{"sessionId":…,"runId":…,"seq":`, the
/// members serde's derived serialisation of
/// [`AgentEventParams`](crate::protocol::AgentEventParams) writes first, in its order. A
/// run's events are written after it ([`event_frame`], [`Repeats::frame`]) without
/// serialising the method, the ids and their names again.
#[derive(Debug, Default)]
pub(crate) struct EventHead {
    session_id: String,
    run_id: String,
    bytes: Vec<u8>,
}

impl EventHead {
    /// The head of run `run_id` of session `session_id` (serialised again only when either
    /// differs from the last one's).
    pub(crate) fn of(&mut self, session_id: &str, run_id: &str) -> serde_json::Result<&[u8]> {
        if self.bytes.is_empty() || self.session_id != session_id || self.run_id != run_id {
            self.bytes.clear();
            self.bytes
                .extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"method\":");
            let written = serde_json::to_writer(&mut self.bytes, AgentEventNotification::METHOD)
                .and_then(|()| {
                    self.bytes.extend_from_slice(b",\"params\":{\"sessionId\":");
                    serde_json::to_writer(&mut self.bytes, session_id)
                })
                .and_then(|()| {
                    self.bytes.extend_from_slice(b",\"runId\":");
                    serde_json::to_writer(&mut self.bytes, run_id)
                });
            if let Err(e) = written {
                self.bytes.clear();
                return Err(e);
            }
            self.bytes.extend_from_slice(b",\"seq\":");
            self.session_id.clear();
            self.session_id.push_str(session_id);
            self.run_id.clear();
            self.run_id.push_str(run_id);
        }
        Ok(&self.bytes)
    }
}

/// Writes the body of an `agent/event` frame after `head` ([`EventHead::of`]): `seq`, then
/// `event` (whatever `write_event` writes), `"unsaved":true` when `unsaved` and `"ref":
/// session_ref` when given, and the ends of the params and the message.
fn event_body(
    out: &mut Vec<u8>,
    head: &[u8],
    seq: u64,
    unsaved: bool,
    session_ref: Option<u64>,
    write_event: impl FnOnce(&mut Vec<u8>) -> serde_json::Result<()>,
) -> serde_json::Result<()> {
    out.extend_from_slice(head);
    out.extend_from_slice(itoa::Buffer::new().format(seq).as_bytes());
    out.extend_from_slice(b",\"event\":");
    write_event(out)?;
    if unsaved {
        out.extend_from_slice(b",\"unsaved\":true");
    }
    if let Some(r) = session_ref {
        out.extend_from_slice(b",\"ref\":");
        out.extend_from_slice(itoa::Buffer::new().format(r).as_bytes());
    }
    out.extend_from_slice(b"}}");
    Ok(())
}

/// The whole `agent/event` frame (header and body) of `event`, numbered `seq`, of the run
/// whose [`EventHead`] is `head`: byte for byte what serialising
/// [`AgentEventParams`](crate::protocol::AgentEventParams) (with `ref`:
/// [`crate::delta::AgentEventRefParams`]) gives. `None` (logged) when the event cannot be
/// serialised.
pub(crate) fn event_frame(
    head: &[u8],
    seq: u64,
    event: &AgentEvent,
    unsaved: bool,
    session_ref: Option<u64>,
) -> Option<Vec<u8>> {
    let capacity = head.len() + crate::transport::FRAME_CAPACITY;
    crate::transport::frame_with(AgentEventNotification::METHOD, capacity, |out| {
        event_body(out, head, seq, unsaved, session_ref, |out| {
            serde_json::to_writer(out, event)
        })
    })
}

/// The messages the run sent, in order, with their JSON (as a [`Message`]): those of the
/// current turn for its `message_end` and `turn_end`, those of the earlier turns (up to
/// [`RUN_BYTES`]) for the run's `agent_end`. An assistant message's `message_start` (the
/// empty message the answer begins with) is not kept with them: the last one is kept apart
/// ([`Partial`]), the next answer's first message being the same but for its timestamp. A
/// message's JSON the session made for its file ([`MessageJson`]) is used and kept as it is.
#[derive(Debug, Default)]
pub(crate) struct Repeats {
    kept: Vec<MessageJson>,
    /// Where the current turn's messages begin in `kept`.
    turn: usize,
    /// The bytes in `kept`.
    size: usize,
    /// The last answer's first message, with its JSON.
    partial: Option<Partial>,
}

/// An answer's first message (the empty one of its `message_start`) and its JSON, which ends
/// with its timestamp: the next answer's first message, equal to it but for the timestamp, is
/// written from these bytes with its own timestamp.
#[derive(Debug)]
struct Partial {
    message: AssistantMessage,
    bytes: Vec<u8>,
    /// Where the timestamp's digits begin in `bytes` (they run to the closing `}`).
    at: usize,
}

impl Partial {
    /// Keeps `message` with `bytes`, its JSON, when they end with its timestamp (the last
    /// member serde's derived serialisation writes); `None` otherwise.
    fn new(message: &AssistantMessage, bytes: Vec<u8>) -> Option<Partial> {
        const NAME: &[u8] = b"\"timestamp\":";
        let mut digits = itoa::Buffer::new();
        let digits = digits.format(message.timestamp).as_bytes();
        let rest = bytes.strip_suffix(b"}")?.strip_suffix(digits)?;
        let at = rest.len();
        rest.ends_with(NAME).then(|| Partial {
            at,
            message: message.clone(),
            bytes,
        })
    }

    /// Writes `message`'s JSON when it equals the kept one but for its timestamp (`false`:
    /// nothing written).
    fn write(&self, out: &mut Vec<u8>, message: &AssistantMessage) -> bool {
        if !equal_but_timestamp(&self.message, message) {
            return false;
        }
        out.extend_from_slice(&self.bytes[..self.at]);
        out.extend_from_slice(itoa::Buffer::new().format(message.timestamp).as_bytes());
        out.push(b'}');
        true
    }
}

/// Whether `a` and `b` are equal in every member but `timestamp` (every member named: a new
/// one must be compared here too).
fn equal_but_timestamp(a: &AssistantMessage, b: &AssistantMessage) -> bool {
    let AssistantMessage {
        content,
        api,
        provider,
        model,
        response_id,
        response_model,
        usage,
        stop_reason,
        raw_stop_reason,
        error_message,
        timestamp: _,
        thinking_level,
        provider_thinking_level,
    } = a;
    *stop_reason == b.stop_reason
        && *content == b.content
        && *api == b.api
        && *provider == b.provider
        && *model == b.model
        && *response_id == b.response_id
        && *response_model == b.response_model
        && *usage == b.usage
        && *raw_stop_reason == b.raw_stop_reason
        && *error_message == b.error_message
        && *thinking_level == b.thinking_level
        && *provider_thinking_level == b.provider_thinking_level
}

impl Repeats {
    /// Whether [`Repeats::frame`] writes `event` (the events that carry a whole message).
    pub(crate) fn takes(event: &AgentEvent) -> bool {
        matches!(
            event,
            AgentEvent::MessageStart { .. }
                | AgentEvent::MessageEnd { .. }
                | AgentEvent::TurnEnd { .. }
                | AgentEvent::AgentEnd { .. }
        )
    }

    /// Notes an event [`Repeats::frame`] does not write: a run's start forgets what an
    /// earlier run left (a run that ended without its `agent_end` reaching the sink).
    pub(crate) fn passed(&mut self, event: &AgentEvent) {
        if matches!(event, AgentEvent::AgentStart) {
            self.forget();
        }
    }

    fn forget(&mut self) {
        self.kept.clear();
        self.turn = 0;
        self.size = 0;
    }

    /// The whole `agent/event` frame (header and body) of `event`, which [`Repeats::takes`],
    /// numbered `seq`, of the run whose [`EventHead`] is `head`; with `"unsaved":true` when
    /// `unsaved`, and `"ref": session_ref` last when given (a compact-delta client's full
    /// event). A message equal to one the turn (for `agent_end`: the run) already sent is
    /// written from that one's bytes; one met for the first time in a `message_start` or
    /// `message_end` is serialised and kept; an answer's first message, from the last one's
    /// bytes when only its timestamp differs ([`Partial`]). `json`: the JSON of the event's
    /// message when the session made it (its file's line holds it), written instead of the
    /// message serialised again. `turn_end` ends the turn, `agent_end` the run (nothing kept
    /// after it). `None` (logged) when a value cannot be serialised.
    pub(crate) fn frame(
        &mut self,
        head: &[u8],
        seq: u64,
        event: AgentEvent,
        unsaved: bool,
        session_ref: Option<u64>,
        json: Option<MessageJson>,
    ) -> Option<Vec<u8>> {
        // A message met for the first time in the turn with its JSON, kept after.
        let mut fresh: Option<MessageJson> = None;
        // The bytes of an answer's first message serialised, kept after.
        let mut fresh_partial: Option<Vec<u8>> = None;
        let all = &self.kept[..];
        let turn = &self.kept[self.turn..];
        let partial = self.partial.as_ref();
        // Room for the frame: what is known to be written again, and a message's worth.
        let capacity = head.len()
            + crate::transport::FRAME_CAPACITY
            + match &event {
                AgentEvent::TurnEnd { .. } => turn.iter().map(|k| k.bytes().len()).sum(),
                AgentEvent::AgentEnd { .. } => self.size,
                _ => crate::transport::FRAME_CAPACITY,
            };
        let frame = crate::transport::frame_with(AgentEventNotification::METHOD, capacity, |out| {
            event_body(out, head, seq, unsaved, session_ref, |out| {
                match &event {
                    AgentEvent::MessageStart { message } => {
                        out.extend_from_slice(b"{\"type\":\"message_start\",\"message\":");
                        match &**message {
                            // An answer's first (empty) message is not kept: its end differs.
                            Message::Assistant(a) => {
                                if !partial.is_some_and(|p| p.write(out, a)) {
                                    let at = out.len();
                                    serde_json::to_writer(&mut *out, &**message)?;
                                    fresh_partial = Some(out[at..].to_vec());
                                }
                            }
                            _ => fresh = write_message(out, turn, message, json)?,
                        }
                    }
                    AgentEvent::MessageEnd { message } => {
                        out.extend_from_slice(b"{\"type\":\"message_end\",\"message\":");
                        fresh = write_message(out, turn, message, json)?;
                    }
                    AgentEvent::TurnEnd {
                        message,
                        tool_results,
                    } => {
                        out.extend_from_slice(b"{\"type\":\"turn_end\",\"message\":");
                        write_again(out, turn, message)?;
                        out.extend_from_slice(b",\"toolResults\":[");
                        for (i, r) in tool_results.iter().enumerate() {
                            if i > 0 {
                                out.push(b',');
                            }
                            write_tool_result(out, turn, r)?;
                        }
                        out.push(b']');
                    }
                    AgentEvent::AgentEnd {
                        messages,
                        will_retry,
                    } => {
                        out.extend_from_slice(b"{\"type\":\"agent_end\",\"messages\":[");
                        // The run's messages come in the order they were sent: each is looked
                        // for from where the last one was found.
                        let mut from = 0;
                        for (i, m) in messages.iter().enumerate() {
                            if i > 0 {
                                out.push(b',');
                            }
                            match all[from..].iter().position(|k| same(k.message(), m)) {
                                Some(k) => {
                                    out.extend_from_slice(all[from + k].bytes());
                                    from += k + 1;
                                }
                                None => serde_json::to_writer(&mut *out, m)?,
                            }
                        }
                        out.extend_from_slice(if *will_retry {
                            b"],\"willRetry\":true"
                        } else {
                            b"],\"willRetry\":false"
                        });
                    }
                    _ => unreachable!("Repeats::frame is given only the events Repeats::takes"),
                }
                out.push(b'}');
                Ok(())
            })
        });
        match event {
            AgentEvent::MessageStart { message } | AgentEvent::MessageEnd { message } => {
                if let Some(json) = fresh {
                    self.size += json.bytes().len();
                    self.kept.push(json);
                } else if let (Some(bytes), Message::Assistant(a)) = (fresh_partial, &*message) {
                    self.partial = Partial::new(a, bytes);
                }
            }
            AgentEvent::TurnEnd { .. } => {
                if self.size > RUN_BYTES {
                    self.forget();
                }
                self.turn = self.kept.len();
            }
            _ => self.forget(),
        }
        frame
    }
}

/// Writes `message`'s JSON: the bytes of an equal message in `kept` when there is one (`None`
/// returned), else `json` when it is this message's, else the message serialised; the JSON
/// written is returned, to be kept.
fn write_message(
    out: &mut Vec<u8>,
    kept: &[MessageJson],
    message: &Arc<Message>,
    json: Option<MessageJson>,
) -> serde_json::Result<Option<MessageJson>> {
    if let Some(k) = kept.iter().rev().find(|k| same(k.message(), message)) {
        out.extend_from_slice(k.bytes());
        return Ok(None);
    }
    let json = match json.filter(|j| j.is_of(message)) {
        Some(json) => json,
        None => MessageJson::new(message)?,
    };
    out.extend_from_slice(json.bytes());
    Ok(Some(json))
}

/// Writes `message`'s JSON, not kept: the bytes of an equal message in `kept` when there is
/// one, else the message serialised.
fn write_again(
    out: &mut Vec<u8>,
    kept: &[MessageJson],
    message: &Arc<Message>,
) -> serde_json::Result<()> {
    match kept.iter().rev().find(|k| same(k.message(), message)) {
        Some(k) => out.extend_from_slice(k.bytes()),
        None => serde_json::to_writer(&mut *out, &**message)?,
    }
    Ok(())
}

/// Whether `a` and `b` are equal messages: the same one (an event's message is shared with
/// the events that repeat it: its `message_end`, the run's `agent_end`), else compared.
fn same(a: &Arc<Message>, b: &Arc<Message>) -> bool {
    Arc::ptr_eq(a, b) || a == b
}

/// Writes tool result `r` as `turn_end`'s `toolResults` carries it (a message, `role` first,
/// as Pi 1.6's): the bytes of a [`Message::ToolResult`] in `kept` equal to it when there is
/// one, else serialised.
fn write_tool_result(
    out: &mut Vec<u8>,
    kept: &[MessageJson],
    r: &ToolResultMessage,
) -> serde_json::Result<()> {
    let whole = kept.iter().rev().find_map(|k| match &**k.message() {
        Message::ToolResult(m) if m == r && k.bytes().starts_with(TOOL_RESULT_TAG) => {
            Some(k.bytes())
        }
        _ => None,
    });
    match whole {
        Some(bytes) => {
            out.extend_from_slice(bytes);
            Ok(())
        }
        None => {
            out.extend_from_slice(TOOL_RESULT_TAG);
            let rest = serde_json::to_vec(r)?;
            out.extend_from_slice(rest.strip_prefix(b"{").unwrap_or(&rest));
            Ok(())
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::delta::AgentEventRefParams;
    use crate::protocol::AgentEventParams;

    /// The frame serde's derived serialisation gives (the reference the written frames must
    /// equal byte for byte).
    fn derived<P: serde::Serialize>(params: &P) -> Vec<u8> {
        #[derive(serde::Serialize)]
        struct Frame<'a, P> {
            jsonrpc: &'static str,
            method: &'static str,
            params: &'a P,
        }
        let body = serde_json::to_vec(&Frame {
            jsonrpc: "2.0",
            method: "agent/event",
            params,
        })
        .unwrap();
        let mut frame = format!("Content-Length: {}\r\n\r\n", body.len()).into_bytes();
        frame.extend(body);
        frame
    }

    /// [`derived`] of `params`, with `sessionRef` when `session_ref` is given.
    fn derived_event(params: &AgentEventParams, session_ref: Option<u64>) -> Vec<u8> {
        match session_ref {
            None => derived(params),
            Some(r) => derived(&AgentEventRefParams {
                params: params.clone(),
                session_ref: r,
            }),
        }
    }

    fn message(v: serde_json::Value) -> Message {
        serde_json::from_value(v).unwrap()
    }

    fn result(id: &str, text: &str, is_error: bool) -> Message {
        message(
            json!({"role": "toolResult", "toolCallId": id, "toolName": "read",
            "content": [{"type": "text", "text": text}],
            "details": {"path": "a \"b\".txt", "lines": [1, 2], "nested": {"z": null, "a": 1.5}},
            "isError": is_error, "timestamp": 1_700_000_000_123_i64}),
        )
    }

    fn tool_result(m: &Message) -> ToolResultMessage {
        match m {
            Message::ToolResult(r) => r.clone(),
            _ => unreachable!(),
        }
    }

    /// One `agent/event` frame of `event` written by `repeats`, checked against the derived
    /// serialisation (with `unsaved` and `ref` as given).
    fn check(
        repeats: &mut Repeats,
        seq: u64,
        event: AgentEvent,
        unsaved: bool,
        session_ref: Option<u64>,
    ) {
        check_json(repeats, seq, event, unsaved, session_ref, None)
    }

    /// The [`MessageJson`] the session makes for `event` when its listener wants it: a
    /// message's but for an answer's `message_start`.
    fn json_of(event: &AgentEvent) -> Option<MessageJson> {
        match event {
            AgentEvent::MessageStart { message } if !matches!(**message, Message::Assistant(_)) => {
                MessageJson::new(message).ok()
            }
            AgentEvent::MessageEnd { message } => MessageJson::new(message).ok(),
            _ => None,
        }
    }

    /// [`check`] with `json` given to [`Repeats::frame`].
    fn check_json(
        repeats: &mut Repeats,
        seq: u64,
        event: AgentEvent,
        unsaved: bool,
        session_ref: Option<u64>,
        json: Option<MessageJson>,
    ) {
        assert!(Repeats::takes(&event));
        let params = AgentEventParams {
            session_id: "s\"1".into(),
            run_id: "run-ü".into(),
            seq,
            event,
            unsaved,
        };
        let want = derived_event(&params, session_ref);
        let mut head = EventHead::default();
        let head = head.of(&params.session_id, &params.run_id).unwrap();
        let got = repeats
            .frame(
                head,
                params.seq,
                params.event,
                params.unsaved,
                session_ref,
                json,
            )
            .unwrap();
        assert_eq!(
            String::from_utf8(got).unwrap(),
            String::from_utf8(want).unwrap(),
            "event {seq}"
        );
    }

    fn assistant(content: serde_json::Value, timestamp: i64) -> Message {
        message(json!({"role": "assistant", "content": content,
            "api": "openai-completions", "provider": "mock", "model": "m", "responseId": "r-1",
            "usage": {"input": 100, "output": 10, "cacheRead": 0, "cacheWrite": 0,
            "totalTokens": 110, "cost": {"input": 0.1, "output": 0.25, "cacheRead": 0,
            "cacheWrite": 0, "total": 0.35}}, "stopReason": "toolUse",
            "rawStopReason": "tool_calls", "timestamp": timestamp}))
    }

    /// A run of two turns (two tool calls, then one), its events in the order the loop sends
    /// them, each frame equal to the derived serialisation's (with and without `unsaved`, with
    /// and without `ref`, with and without the session's [`MessageJson`] of each message);
    /// the results' `message_end`, the `turn_end`s and the `agent_end` are written from the
    /// kept bytes (nothing new kept: the partial assistant message of a `message_start` is
    /// not kept; a message met first is kept with the JSON given), and the run's end forgets
    /// them.
    #[test]
    fn frames_written_from_kept_bytes_equal_the_derived_serialisation() {
        let prompt = message(
            json!({"role": "user", "content": [{"type": "text", "text": "go"}],
            "timestamp": 4}),
        );
        let partial = message(
            json!({"role": "assistant", "content": [], "api": "openai-completions",
            "provider": "mock", "model": "m", "usage": {"input": 0, "output": 0, "cacheRead": 0,
            "cacheWrite": 0, "totalTokens": 0, "cost": {"input": 0, "output": 0, "cacheRead": 0,
            "cacheWrite": 0, "total": 0}}, "stopReason": "stop", "timestamp": 5}),
        );
        let answer = assistant(
            json!([
                {"type": "thinking", "thinking": "hm\n\u{2028}é", "thinkingSignature": "sig"},
                {"type": "toolCall", "id": "c1", "name": "read", "arguments": {"path": "x"}},
                {"type": "toolCall", "id": "c2", "name": "read", "arguments": {"path": "y\u{1}"}}]),
            6,
        );
        let r1 = result("c1", "hello\n\t\"quoted\" \\ 😀", false);
        let r2 = result("c2", "no such file", true);
        let second = assistant(
            json!([{"type": "toolCall", "id": "c3", "name": "read", "arguments": {}}]),
            7,
        );
        let r3 = result("c3", "hello", false);
        let done = assistant(json!([{"type": "text", "text": "done"}]), 8);
        // Each message shared by its events, as the loop sends them; a turn's `turn_end`
        // carries a copy of its answer (equal, not the same).
        let [prompt, partial, answer, r1, r2, second, r3, done] =
            [prompt, partial, answer, r1, r2, second, r3, done].map(Arc::new);
        let copy = |m: &Arc<Message>| Arc::new(Message::clone(m));
        let start = |m: &Arc<Message>| AgentEvent::MessageStart { message: m.clone() };
        let end = |m: &Arc<Message>| AgentEvent::MessageEnd { message: m.clone() };
        let events = [
            (start(&prompt), 1),
            (end(&prompt), 1),
            (start(&partial), 1),
            (end(&answer), 2),
            (start(&r1), 3),
            (end(&r1), 3),
            (start(&r2), 4),
            (end(&r2), 4),
            (
                AgentEvent::TurnEnd {
                    message: copy(&answer),
                    tool_results: vec![tool_result(&r1), tool_result(&r2)],
                },
                4,
            ),
            (start(&partial), 4),
            (end(&second), 5),
            (start(&r3), 6),
            (end(&r3), 6),
            (
                AgentEvent::TurnEnd {
                    message: copy(&second),
                    tool_results: vec![tool_result(&r3)],
                },
                6,
            ),
            (start(&partial), 6),
            (end(&done), 7),
            (
                AgentEvent::TurnEnd {
                    message: copy(&done),
                    tool_results: vec![],
                },
                7,
            ),
            (
                AgentEvent::AgentEnd {
                    messages: vec![
                        prompt.clone(),
                        answer.clone(),
                        r1.clone(),
                        r2.clone(),
                        second.clone(),
                        r3.clone(),
                        done.clone(),
                    ],
                    will_retry: false,
                },
                0,
            ),
        ];
        for (unsaved, session_ref, with_json) in [
            (false, None, false),
            (true, None, false),
            (false, Some(7), false),
            (true, Some(12), false),
            (false, None, true),
            (true, Some(12), true),
        ] {
            let mut repeats = Repeats::default();
            for (seq, (event, kept_after)) in events.iter().enumerate() {
                let json = json_of(event).filter(|_| with_json);
                let kept_before = repeats.kept.len();
                check_json(
                    &mut repeats,
                    seq as u64 + 1,
                    event.clone(),
                    unsaved,
                    session_ref,
                    json.clone(),
                );
                assert_eq!(repeats.kept.len(), *kept_after, "after event {}", seq + 1);
                if let (Some(json), true) = (json, repeats.kept.len() > kept_before) {
                    let last = repeats.kept.last().unwrap();
                    assert!(
                        std::ptr::eq(last.bytes(), json.bytes()),
                        "event {}",
                        seq + 1
                    );
                }
            }
        }
    }

    /// [`check`] of the `message_end` of `message`, without `unsaved` or `ref`.
    fn check_message_end(repeats: &mut Repeats, seq: u64, message: &Message) {
        let event = AgentEvent::MessageEnd {
            message: Arc::new(message.clone()),
        };
        check(repeats, seq, event, false, None);
    }

    /// Messages the run did not send (a client met the run midway, a hook changed a result
    /// after its `message_end`, a message equal in all but one field) are serialised whole,
    /// equal to the derived serialisation, in `turn_end` and in `agent_end`; a run whose
    /// messages hold more than [`RUN_BYTES`] keeps only the current turn's.
    #[test]
    fn messages_not_sent_in_the_run_are_serialised() {
        let r1 = result("c1", "one", false);
        let mut changed = tool_result(&r1);
        changed.is_error = true;
        let user = message(json!({"role": "user", "content": "hi", "timestamp": 3}));
        let nine = result("c9", "nine", false);
        let mut repeats = Repeats::default();
        // The JSON of another message is not taken for this one's.
        let other = Arc::new(result("c1", "other", false));
        check_json(
            &mut repeats,
            1,
            AgentEvent::MessageEnd {
                message: Arc::new(r1.clone()),
            },
            false,
            None,
            MessageJson::new(&other).ok(),
        );
        assert!(!repeats.kept[0].is_of(&other));
        repeats.forget();
        check_message_end(&mut repeats, 1, &r1);
        let turn_end = AgentEvent::TurnEnd {
            message: Arc::new(user.clone()),
            tool_results: vec![changed.clone(), tool_result(&nine)],
        };
        check(&mut repeats, 2, turn_end, false, None);
        assert_eq!(repeats.kept.len(), 1);
        let agent_end = AgentEvent::AgentEnd {
            messages: [
                user.clone(),
                Message::ToolResult(changed.clone()),
                r1.clone(),
                nine.clone(),
                r1.clone(),
            ]
            .map(Arc::new)
            .into(),
            will_retry: false,
        };
        check(&mut repeats, 3, agent_end, false, Some(1));
        assert!(repeats.kept.is_empty());
        // A run's start forgets what a run that did not end kept; other events keep it.
        check_message_end(&mut repeats, 4, &r1);
        repeats.passed(&AgentEvent::ToolExecutionStart {
            tool_call_id: "c".into(),
            tool_name: "read".into(),
            args: json!({}),
        });
        repeats.passed(&AgentEvent::TurnStart);
        assert_eq!(repeats.kept.len(), 1);
        repeats.passed(&AgentEvent::AgentStart);
        assert!(repeats.kept.is_empty());
        // Past RUN_BYTES, a turn's end forgets the run's messages.
        let big = result("c8", &"x".repeat(RUN_BYTES), false);
        for (seq, event) in [
            AgentEvent::MessageEnd {
                message: Arc::new(r1.clone()),
            },
            AgentEvent::MessageEnd {
                message: Arc::new(big.clone()),
            },
            AgentEvent::TurnEnd {
                message: Arc::new(user.clone()),
                tool_results: vec![tool_result(&big)],
            },
        ]
        .into_iter()
        .enumerate()
        {
            check(&mut repeats, seq as u64 + 5, event, false, None);
        }
        assert!(repeats.kept.is_empty());
        check(
            &mut repeats,
            8,
            AgentEvent::AgentEnd {
                messages: vec![Arc::new(r1.clone()), Arc::new(big)],
                will_retry: true,
            },
            false,
            None,
        );
    }

    /// An answer's first message is written from the last one's bytes when only its
    /// timestamp differs (more digits, fewer, negative), serialised again when anything else
    /// differs (the model, the usage), and never kept with the run's messages; every frame
    /// equal to the derived serialisation's.
    #[test]
    fn answers_first_messages_are_written_from_the_last_one_s_bytes() {
        let first = |model: &str, timestamp: i64| {
            let mut m = AssistantMessage::empty("openai-completions", "mock", model);
            m.timestamp = timestamp;
            Arc::new(Message::Assistant(m))
        };
        let mut other_usage = AssistantMessage::empty("openai-completions", "mock", "m2");
        other_usage.usage.input = 3;
        other_usage.timestamp = 12;
        let mut repeats = Repeats::default();
        for (seq, (message, written_again)) in [
            (first("m", 5), false),
            (first("m", 1_800_000_000_000), true),
            (first("m", 7), true),
            (first("m", -1), true),
            (first("m2", 8), false),
            (first("m2", 9), true),
            (Arc::new(Message::Assistant(other_usage)), false),
            (first("m2", 10), false),
        ]
        .into_iter()
        .enumerate()
        {
            let Message::Assistant(a) = Message::clone(&message) else {
                unreachable!()
            };
            let from_bytes = repeats
                .partial
                .as_ref()
                .is_some_and(|p| equal_but_timestamp(&p.message, &a));
            assert_eq!(from_bytes, written_again, "message {seq}");
            let (unsaved, session_ref) = (seq % 2 == 1, (seq % 3 == 0).then_some(seq as u64));
            let event = AgentEvent::MessageStart { message };
            check(&mut repeats, seq as u64 + 1, event, unsaved, session_ref);
            assert!(repeats.kept.is_empty());
            let kept = &repeats.partial.as_ref().unwrap().message;
            assert!(equal_but_timestamp(kept, &a), "message {seq}");
        }
    }

    /// The frames of the events that do not carry a whole message, written after one head
    /// per run (kept while the run and session stay, made again when either changes), equal
    /// the derived serialisation's, with and without `unsaved` and `ref`.
    #[test]
    fn event_frames_after_the_run_s_head_equal_the_derived_serialisation() {
        let update = |e: pi_ai::AssistantEvent| AgentEvent::MessageUpdate {
            assistant_message_event: e,
        };
        let events = [
            AgentEvent::AgentStart,
            AgentEvent::TurnStart,
            update(pi_ai::AssistantEvent::ToolcallDelta {
                content_index: 2,
                delta: "{\"path\":\"a\u{1}\u{2028}é😀\"".into(),
            }),
            AgentEvent::ToolExecutionStart {
                tool_call_id: "c\"1".into(),
                tool_name: "read".into(),
                args: json!({"path": "small.txt", "limit": 5, "nested": {"z": [1.5, null]}}),
            },
            AgentEvent::ToolExecutionEnd {
                tool_call_id: "c\"1".into(),
                tool_name: "read".into(),
                result: pi_core::agent::ToolOutput {
                    content: vec![pi_ai::ContentBlock::text("hello\n\t\"x\" \\")],
                    details: Some(json!({"truncation": {"lines": 5}})),
                    terminate: false,
                    ..Default::default()
                },
                is_error: true,
                duration_ms: Some(12),
            },
            AgentEvent::AgentSettled { aborted: false },
        ];
        let mut head = EventHead::default();
        let mut seq = 0;
        for (session_id, run_id) in [("s\"1", "run-ü"), ("s\"1", "run-2"), ("s2", "run-2")] {
            for event in &events {
                for (unsaved, session_ref) in [(false, None), (true, Some(3)), (false, Some(12))] {
                    seq += 1;
                    let params = AgentEventParams {
                        session_id: session_id.into(),
                        run_id: run_id.into(),
                        seq,
                        event: event.clone(),
                        unsaved,
                    };
                    let want = derived_event(&params, session_ref);
                    let head = head.of(session_id, run_id).unwrap();
                    let got = event_frame(head, seq, event, unsaved, session_ref).unwrap();
                    assert_eq!(
                        String::from_utf8(got).unwrap(),
                        String::from_utf8(want).unwrap(),
                        "event {seq}"
                    );
                }
            }
        }
    }
}

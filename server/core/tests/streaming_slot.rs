//! The agent's streaming slot (`Agent::streaming_message`, what `agent/messages` returns as
//! `streamingMessage`) is the message of exactly the events its listeners were given: a client
//! that reads it at any point of a stream and then applies the later events (through pi-ai's
//! `MessageBuilder::follow`, the one reconstruction) ends with exactly the message the stream
//! ended with. The model is a loopback HTTP server replaying a recorded OpenAI Responses
//! stream (reasoning, text, two tool calls with streamed arguments).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use pi_ai::stream::MessageBuilder;
use pi_ai::{AssistantEvent, AssistantMessage, Message, Model};
use pi_core::agent::{Agent, AgentConfig, AgentEvent, EventSink, WeakAgent};
use pi_core::fs::DiskFs;
use pi_core::tools::default_tools;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const SECOND_TURN: &str = "event: response.output_item.added\n\
data: {\"type\":\"response.output_item.added\",\"output_index\":0,\"item\":{\"id\":\"msg_2\",\"type\":\"message\",\"status\":\"in_progress\",\"content\":[],\"role\":\"assistant\"}}\n\n\
event: response.output_text.delta\n\
data: {\"type\":\"response.output_text.delta\",\"item_id\":\"msg_2\",\"output_index\":0,\"content_index\":0,\"delta\":\"Both read.\"}\n\n\
event: response.output_item.done\n\
data: {\"type\":\"response.output_item.done\",\"output_index\":0,\"item\":{\"id\":\"msg_2\",\"type\":\"message\",\"status\":\"completed\",\"content\":[{\"type\":\"output_text\",\"annotations\":[],\"text\":\"Both read.\"}],\"role\":\"assistant\"}}\n\n\
event: response.completed\n\
data: {\"type\":\"response.completed\",\"response\":{\"id\":\"resp_2\",\"status\":\"completed\",\"usage\":{\"input_tokens\":10,\"output_tokens\":2,\"total_tokens\":12}}}\n\n";

/// Serves the recorded stream to the first request and [`SECOND_TURN`] to the next ones, one
/// connection per request; returns the base URL.
async fn model_server() -> String {
    let first = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../fixtures/sse/openai-responses/reasoning-text-calls.sse"
    ))
    .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let mut n = 0;
        loop {
            let Ok((mut sock, _)) = listener.accept().await else {
                return;
            };
            let body = if n == 0 {
                first.clone()
            } else {
                SECOND_TURN.to_string()
            };
            n += 1;
            tokio::spawn(async move {
                // Read the request: headers, then Content-Length bytes of body.
                let mut buf = Vec::new();
                let mut chunk = [0u8; 8192];
                loop {
                    let r = sock.read(&mut chunk).await.unwrap();
                    if r == 0 {
                        return;
                    }
                    buf.extend_from_slice(&chunk[..r]);
                    let text = String::from_utf8_lossy(&buf).to_string();
                    if let Some(end) = text.find("\r\n\r\n") {
                        let len = text[..end]
                            .lines()
                            .find_map(|l| {
                                let (k, v) = l.split_once(':')?;
                                k.eq_ignore_ascii_case("content-length")
                                    .then(|| v.trim().parse::<usize>().ok())?
                            })
                            .unwrap_or(0);
                        if buf.len() >= end + 4 + len {
                            break;
                        }
                    }
                }
                let head = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                    body.len()
                );
                sock.write_all(head.as_bytes()).await.unwrap();
                sock.write_all(body.as_bytes()).await.unwrap();
                let _ = sock.shutdown().await;
            });
        }
    });
    format!("http://{addr}/v1")
}

/// What a listener saw of the first assistant message: each `message_update` with the slot as
/// it read it when given that event, and the message of `message_end`.
#[derive(Default)]
struct Seen {
    updates: Vec<(AssistantEvent, AssistantMessage)>,
    start: Option<AssistantMessage>,
    end: Option<AssistantMessage>,
}

struct Reader {
    agent: Mutex<Option<WeakAgent>>,
    seen: Mutex<Seen>,
}

#[async_trait]
impl EventSink for Reader {
    async fn emit(&self, event: AgentEvent) {
        let agent = self
            .agent
            .lock()
            .unwrap()
            .as_ref()
            .unwrap()
            .upgrade()
            .unwrap();
        let mut seen = self.seen.lock().unwrap();
        if seen.end.is_some() {
            return;
        }
        match event {
            AgentEvent::MessageStart { message } => {
                if let Message::Assistant(a) = &*message {
                    assert_eq!(agent.streaming_message(), Some(a.clone()));
                    seen.start = Some(a.clone());
                }
            }
            AgentEvent::MessageUpdate {
                assistant_message_event,
            } => {
                let slot = agent.streaming_message().unwrap();
                seen.updates.push((assistant_message_event, slot));
            }
            AgentEvent::MessageEnd { message } => {
                if let Message::Assistant(a) = &*message {
                    assert_eq!(agent.streaming_message(), None);
                    seen.end = Some(a.clone());
                }
            }
            _ => {}
        }
    }
}

#[tokio::test]
async fn a_client_reading_the_slot_mid_stream_and_applying_later_events_gets_the_final_message() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.txt"), "A\n").unwrap();
    std::fs::write(dir.path().join("b.txt"), "B\n").unwrap();
    let model = Model {
        api_key: Some("k".into()),
        ..Model::new(
            pi_ai::Api::OpenaiResponses,
            "openai",
            "gpt-x",
            &model_server().await,
        )
    };
    let cfg = AgentConfig::new(
        model,
        "sys".into(),
        default_tools(Arc::new(DiskFs::new(dir.path().to_path_buf())), None),
    );
    let agent = Agent::new(cfg, Vec::new());
    let reader = Arc::new(Reader {
        agent: Mutex::new(Some(agent.downgrade())),
        seen: Mutex::default(),
    });
    let _sub = agent.subscribe(reader.clone());
    agent.prompt(vec![Message::user_text("read both")]).unwrap();
    agent.wait_for_idle().await;

    let seen = std::mem::take(&mut *reader.seen.lock().unwrap());
    let end = seen.end.clone().unwrap();
    // The stream had everything a slot must rebuild: thinking, text, calls with streamed
    // arguments.
    let kinds: Vec<&str> = seen
        .updates
        .iter()
        .map(|(e, _)| match e {
            AssistantEvent::ThinkingDelta { .. } => "thinking_delta",
            AssistantEvent::TextDelta { .. } => "text_delta",
            AssistantEvent::ToolcallDelta { .. } => "toolcall_delta",
            _ => "",
        })
        .filter(|k| !k.is_empty())
        .collect();
    // Text and thinking deltas one read brought come joined (how many reads the stream
    // took varies); tool-call argument deltas come one by one.
    let mut joined = kinds.clone();
    joined.dedup_by(|a, b| a == b && *a != "toolcall_delta");
    assert_eq!(
        joined,
        [
            "thinking_delta",
            "text_delta",
            "toolcall_delta",
            "toolcall_delta",
            "toolcall_delta",
        ]
    );
    assert!(kinds.len() <= 8, "{kinds:?}");
    // While the arguments streamed (before the call's end), the slot held them parsed so far.
    let mid_call: Vec<_> = seen
        .updates
        .iter()
        .filter(|(e, _)| matches!(e, AssistantEvent::ToolcallDelta { .. }))
        .take(2)
        .map(|(_, slot)| slot.tool_calls()[0].arguments.clone())
        .collect();
    assert_eq!(
        mid_call,
        [serde_json::json!({}), serde_json::json!({"path": "a.txt"})]
    );
    let last = &seen.updates.last().unwrap().1;
    assert_eq!(
        last.tool_calls()
            .iter()
            .map(|c| c.arguments.clone())
            .collect::<Vec<_>>(),
        [
            serde_json::json!({"path": "a.txt"}),
            serde_json::json!({"path": "b.txt"})
        ]
    );

    // Every cut: the slot read there, plus the events after it, is exactly the slot read at
    // the last event (nothing applied twice, nothing missed).
    let mut reads = vec![seen.start.clone().unwrap()];
    reads.extend(seen.updates.iter().map(|(_, s)| s.clone()));
    for (k, read) in reads.iter().enumerate() {
        let mut client = MessageBuilder::follow(read.clone(), Default::default());
        for (e, _) in &seen.updates[k..] {
            client.apply(e);
        }
        assert_eq!(&client.snapshot(), last, "cut after {k} events");
    }
    // And its blocks are the final message's (`message_end`), apart from what only the
    // provider's last event carries (signatures; usage, stop reason and response id are not
    // blocks).
    let unsigned = |m: &AssistantMessage| {
        let mut v = serde_json::to_value(&m.content).unwrap();
        for b in v.as_array_mut().unwrap() {
            let o = b.as_object_mut().unwrap();
            o.remove("thinkingSignature");
            o.remove("textSignature");
        }
        v
    };
    assert_eq!(unsigned(last), unsigned(&end));
    assert_eq!(end.content.len(), 4);
}

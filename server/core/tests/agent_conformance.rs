//! Conformance of the loop with docs/design.md#the-agent-loop, on the in-process scripted model and test tools whose
//! timing and behaviour the tests control.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use pi_ai::{Message, Model, StopReason, ToolSpec};
use pi_core::agent::{
    AfterToolCall, AfterToolOverride, AgentConfig, AgentEvent, AgentHooks, BeforeToolCall,
    Delivery, EventSink, NextTurn, QueueMode, RunControl, ToolContext, ToolError, ToolExecution,
    ToolOutput, ABORTED_TEXT, LENGTH_LIMIT_TEXT,
};
use pi_core::Tool;
use serde_json::{json, Value};

#[derive(Default)]
struct Trace(Mutex<Vec<Value>>);

#[async_trait]
impl EventSink for Trace {
    async fn emit(&self, event: AgentEvent) {
        self.0
            .lock()
            .unwrap()
            .push(serde_json::to_value(event).unwrap());
    }
}

impl Trace {
    /// Event labels, `message_update`s collapsed.
    fn labels(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for e in self.0.lock().unwrap().iter() {
            let t = e["type"].as_str().unwrap();
            let l = match t {
                "message_start" | "message_end" => {
                    let m = &e["message"];
                    match m["role"].as_str().unwrap() {
                        "user" => format!("{t}:user:{}", user_text(&m["content"])),
                        "toolResult" => format!("{t}:result:{}", m["toolCallId"].as_str().unwrap()),
                        r => format!("{t}:{r}"),
                    }
                }
                "tool_execution_start" | "tool_execution_end" | "tool_execution_update" => {
                    format!("{t}:{}", e["toolCallId"].as_str().unwrap())
                }
                _ => t.to_string(),
            };
            if l == "message_update" && out.last() == Some(&l) {
                continue;
            }
            out.push(l);
        }
        out
    }
}

type Exec = Arc<
    dyn Fn(ToolContext, Value) -> futures::future::BoxFuture<'static, Result<ToolOutput, ToolError>>
        + Send
        + Sync,
>;

/// A test tool: name, schema, sequential flag and behaviour.
struct TestTool {
    name: &'static str,
    schema: Value,
    sequential: bool,
    exec: Exec,
    calls: Arc<AtomicUsize>,
}

#[async_trait]
impl Tool for TestTool {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            constrained_sampling: None,
            name: self.name.into(),
            description: "test".into(),
            parameters: self.schema.clone(),
        }
    }
    fn sequential(&self) -> bool {
        self.sequential
    }
    async fn execute(&self, ctx: ToolContext, args: Value) -> Result<ToolOutput, ToolError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        (self.exec)(ctx, args).await
    }
}

fn tool(name: &'static str, exec: Exec) -> Arc<TestTool> {
    Arc::new(TestTool {
        name,
        schema: json!({"type":"object","properties":{"ms":{"type":"number"}}}),
        sequential: false,
        exec,
        calls: Arc::new(AtomicUsize::new(0)),
    })
}

/// Sleeps `ms` (watching the abort) and answers its own name.
fn sleeper(name: &'static str) -> Arc<TestTool> {
    tool(
        name,
        Arc::new(move |ctx, args| {
            Box::pin(async move {
                let ms = args["ms"].as_f64().unwrap_or(0.0) as u64;
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_millis(ms)) => Ok(ToolOutput::text(format!("{name} done"))),
                    _ = ctx.cancel.cancelled() => Err(ToolError::new("cancelled")),
                }
            })
        }),
    )
}

fn config(script: Value, tools: Vec<Arc<dyn Tool>>) -> AgentConfig {
    let model = Model {
        script: Some(Arc::new(serde_json::from_value(script).unwrap())),
        ..Model::new(pi_ai::Api::Scripted, "scripted", "t", "")
    };
    AgentConfig::new(model, "sys".into(), tools)
}

fn results(messages: &[Message]) -> Vec<(String, String, bool)> {
    messages
        .iter()
        .filter_map(|m| match m {
            Message::ToolResult(r) => Some((
                r.tool_call_id.clone(),
                pi_ai::join_text(&r.content),
                r.is_error,
            )),
            _ => None,
        })
        .collect()
}

/// A user message's text in either stored shape: a string, or Pi's `[{type: "text", text}]`.
fn user_text(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(blocks) => blocks
            .iter()
            .filter_map(|b| b["text"].as_str())
            .collect::<Vec<_>>()
            .join(""),
        _ => String::new(),
    }
}

fn user_texts(messages: &[Message]) -> Vec<String> {
    messages
        .iter()
        .filter_map(|m| match m {
            Message::User(u) => Some(u.content.to_text()),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn parallel_batch_stores_in_call_order_whatever_the_completion_order() {
    let cfg = config(
        json!({"responses": [{"toolCalls": [{"name": "slow", "arguments": {"ms": 300}}, {"name": "fast", "arguments": {"ms": "20"}}]}, {"text": "ok"}]}),
        vec![sleeper("slow"), sleeper("fast")],
    );
    let trace = Trace::default();
    let t0 = Instant::now();
    let out = pi_core::run_agent(
        &cfg,
        vec![],
        vec![Message::user_text("go")],
        &RunControl::default(),
        &trace,
    )
    .await;
    assert!(
        t0.elapsed() < Duration::from_millis(600),
        "calls did not overlap: {:?}",
        t0.elapsed()
    );
    assert_eq!(
        trace.labels(),
        [
            "agent_start",
            "turn_start",
            "message_start:user:go",
            "message_end:user:go",
            "message_start:assistant",
            "message_update",
            "message_end:assistant",
            "tool_execution_start:scripted_1_0",
            "tool_execution_start:scripted_1_1",
            "tool_execution_end:scripted_1_1",
            "tool_execution_end:scripted_1_0",
            "message_start:result:scripted_1_0",
            "message_end:result:scripted_1_0",
            "message_start:result:scripted_1_1",
            "message_end:result:scripted_1_1",
            "turn_end",
            "turn_start",
            "message_start:assistant",
            "message_update",
            "message_end:assistant",
            "turn_end",
            "agent_end"
        ]
    );
    // "20" was coerced to 20 by the schema before execution.
    assert_eq!(
        results(&out.messages),
        vec![
            ("scripted_1_0".into(), "slow done".into(), false),
            ("scripted_1_1".into(), "fast done".into(), false)
        ]
    );
}

#[tokio::test]
async fn one_sequential_tool_or_global_mode_makes_the_batch_sequential() {
    for (global, slow_sequential) in [
        (ToolExecution::Sequential, false),
        (ToolExecution::Parallel, true),
    ] {
        let slow = sleeper("slow");
        let slow: Arc<dyn Tool> = Arc::new(TestTool {
            name: "slow",
            schema: slow.schema.clone(),
            sequential: slow_sequential,
            exec: slow.exec.clone(),
            calls: slow.calls.clone(),
        });
        let mut cfg = config(
            json!({"responses": [{"toolCalls": [{"name": "slow", "arguments": {"ms": 150}}, {"name": "fast", "arguments": {"ms": 1}}]}, {"text": "ok"}]}),
            vec![slow, sleeper("fast")],
        );
        cfg.tool_execution = global;
        let trace = Trace::default();
        pi_core::run_agent(
            &cfg,
            vec![],
            vec![Message::user_text("go")],
            &RunControl::default(),
            &trace,
        )
        .await;
        let l = trace.labels();
        let pos = |x: &str| l.iter().position(|e| e == x).unwrap();
        assert!(
            pos("tool_execution_end:scripted_1_0") < pos("tool_execution_start:scripted_1_1"),
            "{l:?}"
        );
        assert!(pos("message_end:result:scripted_1_0") < pos("tool_execution_start:scripted_1_1"));
    }
}

fn terminating(name: &'static str, terminate: bool) -> Arc<TestTool> {
    tool(
        name,
        Arc::new(move |_, _| {
            Box::pin(async move {
                Ok(ToolOutput {
                    terminate,
                    ..ToolOutput::text(name)
                })
            })
        }),
    )
}

#[tokio::test]
async fn terminate_stops_continuation_only_when_every_result_has_it() {
    let script = json!({"responses": [{"toolCalls": [{"name": "a", "arguments": {}}, {"name": "b", "arguments": {}}]}, {"text": "continued"}]});
    // Both terminate: no second request.
    let cfg = config(
        script.clone(),
        vec![terminating("a", true), terminating("b", true)],
    );
    let out = pi_core::run_agent(
        &cfg,
        vec![],
        vec![Message::user_text("go")],
        &RunControl::default(),
        &Trace::default(),
    )
    .await;
    assert_eq!(out.messages.len(), 4);
    // One does not: the loop continues.
    let cfg = config(
        script.clone(),
        vec![terminating("a", true), terminating("b", false)],
    );
    let out = pi_core::run_agent(
        &cfg,
        vec![],
        vec![Message::user_text("go")],
        &RunControl::default(),
        &Trace::default(),
    )
    .await;
    assert_eq!(out.messages.len(), 5);
    // Both terminate but steering is queued: another request still happens.
    let cfg = config(script, vec![terminating("a", true), terminating("b", true)]);
    let control = RunControl::default();
    control.enqueue(Message::user_text("steer"), Delivery::Steer);
    let out = pi_core::run_agent(
        &cfg,
        vec![],
        vec![Message::user_text("go")],
        &control,
        &Trace::default(),
    )
    .await;
    // The steer queued before the run is delivered before the first request (checked at start).
    assert_eq!(user_texts(&out.messages), ["go", "steer"]);
    assert_eq!(out.messages.len(), 5);
}

struct Mutating {
    seen_args: Mutex<Vec<Value>>,
}

#[async_trait]
impl AgentHooks for Mutating {
    async fn before_tool_call(&self, call: BeforeToolCall<'_>) -> Result<(), String> {
        if call.call.name == "blocked" {
            return Err("blocked by policy: no blocked tools".into());
        }
        // Trusted code changes path to a number; nobody validates it again.
        call.args["path"] = json!(42);
        Ok(())
    }
    async fn after_tool_call(
        &self,
        call: AfterToolCall<'_>,
    ) -> Result<Option<AfterToolOverride>, String> {
        self.seen_args.lock().unwrap().push(call.args.clone());
        Ok(None)
    }
}

#[tokio::test]
async fn seed_exercise_3_trusted_hook_mutation_and_late_update() {
    // Schema {path: string}; valid args pass; the hook makes path a number; the tool emits
    // progress, returns an error, then emits one late update.
    let executed_with = Arc::new(Mutex::new(Value::Null));
    let seen = executed_with.clone();
    let t = Arc::new(TestTool {
        name: "t",
        schema: json!({"type":"object","required":["path"],"properties":{"path":{"type":"string"}}}),
        sequential: false,
        exec: Arc::new(move |ctx, args| {
            let seen = seen.clone();
            Box::pin(async move {
                *seen.lock().unwrap() = args.clone();
                (ctx.on_update)(ToolOutput::text("progress 1"));
                let late = ctx.on_update.clone();
                tokio::spawn(async move {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    late(ToolOutput::text("late update"));
                });
                Err(ToolError::new("path must be a string, got 42"))
            })
        }),
        calls: Arc::new(AtomicUsize::new(0)),
    });
    let blocked = sleeper("blocked");
    let mut cfg = config(
        json!({"responses": [{"toolCalls": [{"name": "t", "arguments": {"path": "a.txt"}}, {"name": "blocked", "arguments": {}}]}, {"text": "ok", "delayMs": 100}]}),
        vec![t, blocked.clone()],
    );
    let hooks = Arc::new(Mutating {
        seen_args: Mutex::new(Vec::new()),
    });
    cfg.hooks = Some(hooks.clone());
    let trace = Trace::default();
    let out = pi_core::run_agent(
        &cfg,
        vec![],
        vec![Message::user_text("go")],
        &RunControl::default(),
        &trace,
    )
    .await;
    // Validation saw a valid string; execution got the hook's number; the after hook saw it too.
    assert_eq!(*executed_with.lock().unwrap(), json!({"path": 42}));
    assert_eq!(*hooks.seen_args.lock().unwrap(), vec![json!({"path": 42})]);
    // Canonical results: the tool's error, and the policy block (execute never ran).
    assert_eq!(
        results(&out.messages),
        vec![
            (
                "scripted_1_0".into(),
                "path must be a string, got 42".into(),
                true
            ),
            (
                "scripted_1_1".into(),
                "blocked by policy: no blocked tools".into(),
                true
            )
        ]
    );
    assert_eq!(blocked.calls.load(Ordering::SeqCst), 0);
    // Events: start for both (processing began), the blocked call ends at once, one update,
    // the error end; the late update never appears.
    let l = trace.labels();
    let updates: Vec<&String> = l
        .iter()
        .filter(|x| x.starts_with("tool_execution_update"))
        .collect();
    assert_eq!(updates, ["tool_execution_update:scripted_1_0"]);
    let events = trace.0.lock().unwrap().clone();
    let update = events
        .iter()
        .find(|e| e["type"] == "tool_execution_update")
        .unwrap();
    assert_eq!(
        update["partialResult"],
        json!({"content": [{"type": "text", "text": "progress 1"}]})
    );
    let ends: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "tool_execution_end")
        .collect();
    assert_eq!(ends[0]["toolCallId"], "scripted_1_1");
    assert_eq!(
        ends[1]["result"],
        json!({"content": [{"type": "text", "text": "path must be a string, got 42"}], "details": {}})
    );
}

#[tokio::test]
async fn seed_exercise_1_truncated_batch_with_intervention() {
    // The model streams two valid-looking calls, then hits the length limit; while it streams
    // the user queues one steering message and one follow-up.
    let ran = sleeper("write");
    let cfg = config(
        json!({"responses": [
            {"toolCalls": [{"name": "write", "arguments": {"ms": 1}}, {"name": "write", "arguments": {"ms": 1}}], "stopReason": "length", "delayMs": 200},
            {"text": "after steering"},
            {"text": "after follow-up"}
        ]}),
        vec![ran.clone()],
    );
    let control = RunControl::default();
    let c2 = control.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(50)).await;
        c2.enqueue(Message::user_text("steer: smaller chunks"), Delivery::Steer);
        c2.enqueue(
            Message::user_text("follow-up: then run tests"),
            Delivery::FollowUp,
        );
    });
    let trace = Trace::default();
    let out = pi_core::run_agent(
        &cfg,
        vec![],
        vec![Message::user_text("write big file")],
        &control,
        &trace,
    )
    .await;
    // Harness-owned: no tool executes; each call gets a paired error result.
    assert_eq!(ran.calls.load(Ordering::SeqCst), 0);
    assert_eq!(
        results(&out.messages),
        vec![
            ("scripted_1_0".into(), LENGTH_LIMIT_TEXT.into(), true),
            ("scripted_1_1".into(), LENGTH_LIMIT_TEXT.into(), true)
        ]
    );
    // The steer is model-visible in request 2 (after the batch), the follow-up in request 3
    // (when the agent would otherwise stop).
    let shape: Vec<String> = out
        .messages
        .iter()
        .map(|m| match m {
            Message::User(u) => format!("user:{}", u.content.to_text()),
            Message::Assistant(a) => format!("assistant:{:?}:{}", a.stop_reason, a.text()),
            Message::ToolResult(r) => format!("result:{}", r.tool_call_id),
            Message::System(s) => format!("system:{}", s.update_text()),
        })
        .collect();
    assert_eq!(
        shape,
        [
            "user:write big file",
            "assistant:Length:",
            "result:scripted_1_0",
            "result:scripted_1_1",
            "user:steer: smaller chunks",
            "assistant:Stop:after steering",
            "user:follow-up: then run tests",
            "assistant:Stop:after follow-up"
        ]
    );
}

#[tokio::test]
async fn panicking_tool_becomes_an_error_result() {
    let boom = tool(
        "boom",
        Arc::new(|_, _| Box::pin(async { panic!("kaboom") })),
    );
    let cfg = config(
        json!({"responses": [{"toolCalls": [{"name": "boom", "arguments": {}}]}, {"text": "ok"}]}),
        vec![boom],
    );
    let out = pi_core::run_agent(
        &cfg,
        vec![],
        vec![Message::user_text("go")],
        &RunControl::default(),
        &Trace::default(),
    )
    .await;
    assert_eq!(
        results(&out.messages),
        vec![(
            "scripted_1_0".into(),
            "Tool boom failed: it panicked".into(),
            true
        )]
    );
    assert_eq!(out.stop_reason, StopReason::Stop);
}

#[tokio::test]
async fn abort_stops_a_tool_that_ignores_it_after_the_grace() {
    let stubborn = tool(
        "stubborn",
        Arc::new(|_, _| {
            Box::pin(async {
                tokio::time::sleep(Duration::from_secs(30)).await;
                Ok(ToolOutput::text("late"))
            })
        }),
    );
    let cfg = config(
        json!({"responses": [{"toolCalls": [{"name": "stubborn", "arguments": {}}]}]}),
        vec![stubborn],
    );
    let control = RunControl::default();
    let c2 = control.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(100)).await;
        c2.cancel.cancel();
    });
    let t0 = Instant::now();
    let out = pi_core::run_agent(
        &cfg,
        vec![],
        vec![Message::user_text("go")],
        &control,
        &Trace::default(),
    )
    .await;
    let took = t0.elapsed();
    assert!(
        took >= pi_core::agent::ABORT_GRACE
            && took < pi_core::agent::ABORT_GRACE + Duration::from_secs(1),
        "{took:?}"
    );
    assert_eq!(
        results(&out.messages),
        vec![("scripted_1_0".into(), ABORTED_TEXT.into(), true)]
    );
    assert_eq!(out.stop_reason, StopReason::Aborted);
}

#[tokio::test]
async fn queue_modes_and_next_turn_delivery() {
    for (mode, expected) in [
        (QueueMode::OneAtATime, vec!["go", "s1", "s2"]),
        (QueueMode::All, vec!["go", "s1", "s2"]),
    ] {
        let cfg = config(
            json!({"responses": [{"text": "a"}, {"text": "b"}, {"text": "c"}]}),
            vec![],
        );
        let control = RunControl::default();
        control.set_modes(mode, mode);
        control.enqueue(Message::user_text("s1"), Delivery::Steer);
        control.enqueue(Message::user_text("s2"), Delivery::Steer);
        control.enqueue(Message::user_text("later"), Delivery::NextTurn);
        let out = pi_core::run_agent(
            &cfg,
            vec![],
            vec![Message::user_text("go")],
            &control,
            &Trace::default(),
        )
        .await;
        assert_eq!(user_texts(&out.messages), expected);
        let assistants = out
            .messages
            .iter()
            .filter(|m| matches!(m, Message::Assistant(_)))
            .count();
        // One at a time: s1 before request 1, s2 before request 2. All: both before request 1.
        assert_eq!(
            assistants,
            if mode == QueueMode::All { 1 } else { 2 },
            "{mode:?}"
        );
        assert!(out.undelivered.is_empty());
        assert_eq!(user_texts(&out.next_turn), ["later"]);
    }
}

#[tokio::test]
async fn steer01_steering_is_not_lost_when_abort_lands() {
    // Three sequential slow calls; a steer arrives during tool 1; abort after tool 1 ends.
    let slow = sleeper("slow");
    let slow: Arc<dyn Tool> = Arc::new(TestTool {
        name: "slow",
        schema: slow.schema.clone(),
        sequential: true,
        exec: slow.exec.clone(),
        calls: slow.calls.clone(),
    });
    let cfg = config(
        json!({"responses": [{"toolCalls": [{"name": "slow", "arguments": {"ms": 200}}, {"name": "slow", "arguments": {"ms": 5000}}, {"name": "slow", "arguments": {"ms": 5000}}]}, {"text": "status: steered"}]}),
        vec![slow],
    );
    let control = RunControl::default();
    let c2 = control.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(100)).await;
        c2.enqueue(Message::user_text("use yarn instead"), Delivery::Steer);
        tokio::time::sleep(Duration::from_millis(200)).await;
        c2.cancel.cancel();
    });
    let out = pi_core::run_agent(
        &cfg,
        vec![],
        vec![Message::user_text("install")],
        &control,
        &Trace::default(),
    )
    .await;
    assert_eq!(out.stop_reason, StopReason::Aborted);
    assert_eq!(user_texts(&out.undelivered), ["use yarn instead"]);
    // Every call is paired.
    assert_eq!(results(&out.messages).len(), 3);
    // The next prompt carries the undelivered steer before "status?".
    let mut prompts = out.undelivered.clone();
    prompts.push(Message::user_text("status?"));
    let out2 = pi_core::run_agent(
        &cfg,
        out.messages.clone(),
        prompts,
        &RunControl::default(),
        &Trace::default(),
    )
    .await;
    let users = user_texts(&out2.messages);
    assert_eq!(
        users[users.len() - 2..],
        ["use yarn instead".to_string(), "status?".to_string()]
    );
}

struct Injector(AtomicUsize);

#[async_trait]
impl AgentHooks for Injector {
    async fn prepare_next_turn(&self, next: &mut NextTurn) {
        let n = self.0.fetch_add(1, Ordering::SeqCst);
        next.system_prompt = format!("turn {n}");
        next.messages_mut()
            .push(Message::user_text(format!("context note {n}")));
    }
}

#[tokio::test]
async fn prepare_next_turn_replaces_the_context_for_each_request() {
    let mut cfg = config(
        json!({"responses": [{"toolCalls": [{"name": "fast", "arguments": {"ms": 1}}]}, {"text": "ok"}]}),
        vec![sleeper("fast")],
    );
    let hooks = Arc::new(Injector(AtomicUsize::new(0)));
    cfg.hooks = Some(hooks.clone());
    let out = pi_core::run_agent(
        &cfg,
        vec![],
        vec![Message::user_text("go")],
        &RunControl::default(),
        &Trace::default(),
    )
    .await;
    assert_eq!(hooks.0.load(Ordering::SeqCst), 2);
    assert_eq!(
        user_texts(&out.messages),
        ["go", "context note 0", "context note 1"]
    );
}

/// Records events and can hold the run at `agent_end` for a while.
struct SlowEnd {
    seen: Mutex<Vec<String>>,
    delay: Duration,
    name: &'static str,
    order: Arc<Mutex<Vec<String>>>,
}

#[async_trait]
impl EventSink for SlowEnd {
    async fn emit(&self, event: AgentEvent) {
        let t = serde_json::to_value(&event).unwrap()["type"]
            .as_str()
            .unwrap()
            .to_string();
        self.order
            .lock()
            .unwrap()
            .push(format!("{}:{t}", self.name));
        if t == "agent_end" {
            tokio::time::sleep(self.delay).await;
        }
        self.seen.lock().unwrap().push(t);
    }
}

#[tokio::test]
async fn agent_listeners_run_in_order_slot_streams_and_idle_waits_for_listeners() {
    let cfg = config(
        json!({"responses": [{"text": "a reasonably long answer streamed in chunks", "delayMs": 50}]}),
        vec![],
    );
    let agent = pi_core::agent::Agent::new(cfg, vec![]);
    let order = Arc::new(Mutex::new(Vec::new()));
    let first = Arc::new(SlowEnd {
        seen: Mutex::new(vec![]),
        delay: Duration::from_millis(300),
        name: "first",
        order: order.clone(),
    });
    let second = Arc::new(SlowEnd {
        seen: Mutex::new(vec![]),
        delay: Duration::ZERO,
        name: "second",
        order: order.clone(),
    });
    let dropped = Arc::new(SlowEnd {
        seen: Mutex::new(vec![]),
        delay: Duration::ZERO,
        name: "dropped",
        order: order.clone(),
    });
    let _s1 = agent.subscribe(first.clone());
    let _s2 = agent.subscribe(second.clone());
    agent.subscribe(dropped.clone()).unsubscribe();
    agent.prompt(vec![Message::user_text("go")]).unwrap();
    assert!(agent.is_streaming());
    assert!(matches!(
        agent.prompt(vec![Message::user_text("again")]),
        Err(pi_core::agent::AgentBusy)
    ));
    // The in-flight slot fills while the response streams.
    let mut saw_partial = false;
    for _ in 0..200 {
        if let Some(p) = agent.streaming_message() {
            if !p.text().is_empty() {
                saw_partial = true;
                assert!("a reasonably long answer streamed in chunks".starts_with(&p.text()));
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    assert!(saw_partial);
    let t0 = Instant::now();
    agent.wait_for_idle().await;
    // The first listener's agent_end delay holds idleness.
    assert!(
        t0.elapsed() >= Duration::from_millis(250),
        "{:?}",
        t0.elapsed()
    );
    assert!(!agent.is_streaming() && agent.streaming_message().is_none());
    assert_eq!(agent.messages().len(), 2);
    assert!(dropped.seen.lock().unwrap().is_empty());
    let o = order.lock().unwrap().clone();
    // Registration order for every event: first, then second.
    for pair in o.chunks(2) {
        assert!(
            pair[0].starts_with("first:") && pair[1].starts_with("second:"),
            "{o:?}"
        );
        assert_eq!(pair[0][6..], pair[1][7..]);
    }
    assert_eq!(*first.seen.lock().unwrap(), *second.seen.lock().unwrap());
    // Idle again: a new prompt is accepted and continues the conversation.
    agent.prompt(vec![Message::user_text("more")]).unwrap();
    agent.wait_for_idle().await;
    assert_eq!(user_texts(&agent.messages()), ["go", "more"]);
}

/// Prompts the agent again from inside the `agent_end` listener, as a client that saw
/// `agent_end` would.
struct Reprompt {
    agent: Mutex<Option<pi_core::agent::WeakAgent>>,
    result: Mutex<Option<bool>>,
}

#[async_trait]
impl EventSink for Reprompt {
    async fn emit(&self, event: AgentEvent) {
        if matches!(event, AgentEvent::AgentEnd { .. }) && self.result.lock().unwrap().is_none() {
            let agent = self
                .agent
                .lock()
                .unwrap()
                .clone()
                .and_then(|w| w.upgrade())
                .unwrap();
            let ok = agent
                .prompt(vec![Message::user_text("right after")])
                .is_ok();
            *self.result.lock().unwrap() = Some(ok);
        }
    }
}

#[tokio::test]
async fn a_prompt_sent_after_agent_end_starts_the_next_run() {
    let cfg = config(
        json!({"responses": [{"text": "one"}, {"text": "two"}]}),
        vec![],
    );
    let agent = pi_core::agent::Agent::new(cfg, vec![]);
    let l = Arc::new(Reprompt {
        agent: Mutex::new(Some(agent.downgrade())),
        result: Mutex::new(None),
    });
    let _s = agent.subscribe(l.clone());
    let (first, _) = agent.prompt(vec![Message::user_text("go")]).unwrap();
    // Wait for both runs.
    for _ in 0..200 {
        if l.result.lock().unwrap().is_some() && !agent.is_streaming() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    agent.wait_for_idle().await;
    assert_eq!(*l.result.lock().unwrap(), Some(true));
    assert_ne!(agent.run_id().unwrap(), first);
    assert_eq!(user_texts(&agent.messages()), ["go", "right after"]);
    assert_eq!(agent.messages().len(), 4);
}

//! [`Agent`]: a conversation with at most one run at a time, listeners, queues and state, as
//! Pi's `Agent` class exposes them (docs/design.md#the-agent-loop "Lifecycle events and subscribers", "Streaming has
//! two outputs").
//!
//! - `subscribe` adds a listener and returns a [`Subscription`] whose drop (or
//!   [`Subscription::unsubscribe`]) removes it. Listeners run in registration order and each is
//!   awaited before the loop advances, so an `agent_end` listener can delay idleness.
//! - One in-flight assistant slot: `message_start` starts a [`Follower`] with
//!   its message, every `message_update` the listeners get is applied to it (so
//!   [`Agent::streaming_message`] is always the message of exactly the events forwarded so
//!   far), `message_end` clears it and appends the canonical message to [`Agent::messages`].
//! - [`Agent::wait_for_idle`] resolves after the run's final listeners settled and its state
//!   was cleared.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};

use parking_lot::Mutex;

use async_trait::async_trait;
use pi_ai::{AssistantMessage, Message};
use tokio::sync::watch;

use super::{
    run_agent_from, run_compaction, AgentConfig, AgentEvent, CompactionError, CompactionResult,
    Delivery, EventSink, Follower, QueueMode, RunControl, RunOutcome,
};
use tokio::sync::oneshot;

/// What a run does first.
enum Work {
    Prompt(Vec<Message>),
    Compact(Option<String>),
}

/// The result of [`Agent::compact`].
pub type CompactionOutcome = Result<CompactionResult, CompactionError>;

/// How long [`Agent::settle`] waits for an ending run's last bookkeeping (it takes
/// microseconds; the bound only keeps a stuck loop from holding a request).
pub const SETTLE_LIMIT: std::time::Duration = std::time::Duration::from_secs(2);

/// A prompt was sent while a run is active (steer, follow up or abort instead).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the agent is already running; steer, follow up, or abort first")]
pub struct AgentBusy;

/// The last number given to a configuration ([`Agent::config_generation`]).
static CONFIG_GENERATION: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// A number no configuration of the process had before.
fn next_config_generation() -> u64 {
    CONFIG_GENERATION.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1
}

struct State {
    config: AgentConfig,
    /// The number naming `config` ([`Agent::config_generation`]).
    config_generation: u64,
    messages: Vec<Message>,
    /// Messages before this index carry usage of a context that has changed since
    /// ([`crate::session::SessionContext::usage_from`]; a run's compaction moves it).
    usage_from: usize,
    /// The in-flight assistant message, rebuilt from exactly the events the listeners get.
    streaming: Option<Follower>,
    running: Option<RunControl>,
    /// Id of the active run (uuid v7), or of the last one.
    run_id: Option<String>,
    /// Messages for the next prompt: undelivered after an abort, and next-turn ones.
    pending: Vec<Message>,
    modes: (QueueMode, QueueMode),
    last_outcome: Option<RunOutcome>,
    /// Set once the active run has emitted `agent_end`: it is finishing, and a prompt sent now
    /// (by a client that saw `agent_end`) starts the next run instead of being refused.
    ending: bool,
    /// A prompt accepted while the previous run was finishing: its run id, control, messages.
    next_run: Option<(String, RunControl, Vec<Message>)>,
    /// Between `compaction_start` and `compaction_end`.
    compacting: bool,
    /// A compaction asked for during a run: it runs when the run settles (case CMP-06).
    deferred_compaction: Option<(
        String,
        RunControl,
        Option<String>,
        oneshot::Sender<CompactionOutcome>,
    )>,
}

/// The listeners of an [`Agent`] with their subscription ids.
type Listeners = Arc<[(u64, Arc<dyn EventSink>)]>;

struct Inner {
    state: Mutex<State>,
    /// The listeners in registration order, as one shared list: an event takes the list with
    /// one reference count (no copy per event); subscribing or unsubscribing makes a new one.
    listeners: Mutex<Listeners>,
    next_id: AtomicU64,
    idle: watch::Sender<bool>,
}

/// Removes its listener when dropped.
pub struct Subscription {
    inner: Weak<Inner>,
    id: u64,
}

impl Subscription {
    /// Removes the listener now.
    pub fn unsubscribe(self) {}
}

impl Drop for Subscription {
    fn drop(&mut self) {
        if let Some(inner) = self.inner.upgrade() {
            let mut listeners = inner.listeners.lock();
            let kept: Listeners = listeners
                .iter()
                .filter(|(id, _)| *id != self.id)
                .cloned()
                .collect();
            *listeners = kept;
        }
    }
}

/// A weak handle to an [`Agent`].
#[derive(Clone)]
pub struct WeakAgent {
    inner: Weak<Inner>,
}

impl WeakAgent {
    /// The agent, if it still exists.
    pub fn upgrade(&self) -> Option<Agent> {
        self.inner.upgrade().map(|inner| Agent { inner })
    }
}

/// A stateful agent: one conversation, at most one active run.
#[derive(Clone)]
pub struct Agent {
    inner: Arc<Inner>,
}

/// The run's sink: updates the agent's state, then awaits every listener in order.
struct Dispatch {
    inner: Arc<Inner>,
}

#[async_trait]
impl EventSink for Dispatch {
    async fn emit(&self, event: AgentEvent) {
        {
            let mut st = self.inner.state.lock();
            match &event {
                AgentEvent::MessageStart { message } => {
                    if let Message::Assistant(a) = &**message {
                        let rates = st.config.model.cost.clone();
                        st.streaming = Some(Follower::new(a.clone(), rates));
                    }
                }
                AgentEvent::MessageUpdate {
                    assistant_message_event,
                } => {
                    if let Some(slot) = st.streaming.as_mut() {
                        slot.apply(assistant_message_event);
                    }
                }
                // A run ended to be retried (`willRetry`) goes on: not ending.
                AgentEvent::AgentEnd { will_retry, .. } => st.ending = !*will_retry,
                // A recovery's retry is a new run of the same loop (Pi 1.6's
                // `agent.continue()` after the compaction): live again.
                AgentEvent::AgentStart => st.ending = false,
                AgentEvent::CompactionStart { .. } => st.compacting = true,
                AgentEvent::CompactionEnd { context, .. } => {
                    st.compacting = false;
                    if let Some(c) = context {
                        st.messages.clone_from(c);
                        st.usage_from = c.len();
                    }
                }
                AgentEvent::MessageEnd { message } => {
                    if matches!(**message, Message::Assistant(_)) {
                        st.streaming = None;
                    }
                    st.messages.push(Message::clone(message));
                }
                _ => {}
            }
        }
        // The list as it is now (a listener that unsubscribes meanwhile still gets this event).
        let listeners = self.inner.listeners.lock().clone();
        // The last listener that wants the event takes it itself (an `agent_end` holds the
        // run's messages); those before it get copies.
        let Some(last) = listeners.iter().rposition(|(_, l)| l.wants(&event)) else {
            return;
        };
        for (_, l) in &listeners[..last] {
            if l.wants(&event) {
                l.emit(event.clone()).await;
            }
        }
        listeners[last].1.emit(event).await;
    }
}

impl Agent {
    /// An idle agent with `config` and an existing conversation.
    pub fn new(config: AgentConfig, messages: Vec<Message>) -> Agent {
        Agent {
            inner: Arc::new(Inner {
                state: Mutex::new(State {
                    config,
                    config_generation: next_config_generation(),
                    messages,
                    usage_from: 0,
                    streaming: None,
                    running: None,
                    run_id: None,
                    pending: Vec::new(),
                    modes: (QueueMode::OneAtATime, QueueMode::OneAtATime),
                    last_outcome: None,
                    ending: false,
                    next_run: None,
                    compacting: false,
                    deferred_compaction: None,
                }),
                listeners: Mutex::new(Arc::new([])),
                next_id: AtomicU64::new(1),
                idle: watch::channel(true).0,
            }),
        }
    }

    /// Adds a listener; it sees every later event, in registration order with the others.
    pub fn subscribe(&self, listener: Arc<dyn EventSink>) -> Subscription {
        let id = self.inner.next_id.fetch_add(1, Ordering::SeqCst);
        let mut listeners = self.inner.listeners.lock();
        let grown: Listeners = listeners
            .iter()
            .cloned()
            .chain(std::iter::once((id, listener)))
            .collect();
        *listeners = grown;
        Subscription {
            inner: Arc::downgrade(&self.inner),
            id,
        }
    }

    /// Starts a run with `prompts` (after any pending messages) and returns its id and
    /// control at once. Steering or follow-ups queued after the run's last check start a
    /// continuation run (a new id) instead of waiting; after an abort they wait for the next
    /// prompt ([`Agent::pending`]).
    pub fn prompt(&self, prompts: Vec<Message>) -> Result<(String, RunControl), AgentBusy> {
        self.start(Work::Prompt(prompts))
            .map(|(id, control, _)| (id, control))
    }

    /// Compacts the conversation (Pi's `compact(customInstructions)`) as a run of its own: the
    /// agent is busy until `compaction_end`, so a prompt meanwhile is refused unless it is
    /// queued as steering or follow-up, which runs after the compaction (case PAIR-03). Asked
    /// for during a run, it waits until that run settles and never interrupts it (case CMP-06);
    /// a second request while one waits is refused. Returns the compaction's run id, its
    /// control (abort cancels the summary request) and the result to come.
    pub fn compact(
        &self,
        instructions: Option<String>,
    ) -> Result<(String, RunControl, oneshot::Receiver<CompactionOutcome>), AgentBusy> {
        let (id, control, rx) = self.start(Work::Compact(instructions))?;
        let rx = rx.ok_or(AgentBusy)?;
        Ok((id, control, rx))
    }

    fn start(
        &self,
        work: Work,
    ) -> Result<
        (
            String,
            RunControl,
            Option<oneshot::Receiver<CompactionOutcome>>,
        ),
        AgentBusy,
    > {
        let (tx, rx) = match work {
            Work::Compact(_) => {
                let (tx, rx) = oneshot::channel();
                (Some(tx), Some(rx))
            }
            Work::Prompt(_) => (None, None),
        };
        let (cfg, (history, usage_from), work, control, run_id) = {
            let mut st = self.inner.state.lock();
            if st.running.is_some() {
                let prompts = match work {
                    Work::Prompt(prompts) => prompts,
                    Work::Compact(instructions) => {
                        if st.deferred_compaction.is_some() {
                            return Err(AgentBusy);
                        }
                        let control = RunControl::default();
                        control.set_modes(st.modes.0, st.modes.1);
                        let run_id = uuid::Uuid::now_v7().to_string();
                        let Some(tx) = tx else { return Err(AgentBusy) };
                        st.deferred_compaction =
                            Some((run_id.clone(), control.clone(), instructions, tx));
                        return Ok((run_id, control, rx));
                    }
                };
                if !st.ending || st.next_run.is_some() {
                    return Err(AgentBusy);
                }
                // The run already ended for the client: this prompt starts the next one.
                let control = RunControl::default();
                control.set_modes(st.modes.0, st.modes.1);
                let run_id = uuid::Uuid::now_v7().to_string();
                st.next_run = Some((run_id.clone(), control.clone(), prompts));
                return Ok((run_id, control, None));
            }
            let control = RunControl::default();
            control.set_modes(st.modes.0, st.modes.1);
            st.running = Some(control.clone());
            st.ending = false;
            let run_id = uuid::Uuid::now_v7().to_string();
            st.run_id = Some(run_id.clone());
            let work = match work {
                Work::Prompt(prompts) => {
                    let mut all = std::mem::take(&mut st.pending);
                    all.extend(prompts);
                    Work::Prompt(all)
                }
                w => w,
            };
            (
                st.config.clone(),
                // The run's own copy, with room for the messages a turn appends: a long
                // history is not copied again by the run's first push.
                (with_room(&st.messages), st.usage_from),
                work,
                control,
                run_id,
            )
        };
        self.inner.idle.send_replace(false);
        let inner = self.inner.clone();
        let first = control.clone();
        tokio::spawn(async move {
            let (mut cfg, mut history, mut work, mut ctl) = (cfg, history, work, first);
            let mut usage_from = usage_from;
            let mut tx = tx;
            let settled_aborted: bool;
            // Whether a prompt ran: a compaction asked for on its own (`compact`) settles with
            // no `agent_settled`, as Pi 1.6 sends it only at the end of a prompt's run
            // (`_emitAgentSettled` in `agent-session.js`'s prompt path).
            let mut prompted = false;
            loop {
                let sink = Dispatch {
                    inner: inner.clone(),
                };
                let outcome = match work {
                    Work::Prompt(prompts) => {
                        prompted = true;
                        run_agent_from(&cfg, history, usage_from, prompts, &ctl, &sink).await
                    }
                    Work::Compact(instructions) => {
                        let (outcome, result) =
                            run_compaction(&cfg, history, instructions.as_deref(), &ctl, &sink)
                                .await;
                        if let Some(tx) = tx.take() {
                            let _ = tx.send(result);
                        }
                        outcome
                    }
                };
                let mut st = inner.state.lock();
                st.messages.clone_from(&outcome.messages);
                if let Some(u) = outcome.usage_from {
                    st.usage_from = u;
                }
                usage_from = st.usage_from;
                st.pending.extend(outcome.next_turn.iter().cloned());
                st.streaming = None;
                st.ending = false;
                let queued = !outcome.undelivered.is_empty() && !ctl.cancel.is_cancelled();
                if !queued {
                    st.pending.splice(0..0, outcome.undelivered.iter().cloned());
                }
                let next = st.next_run.take();
                if !queued && next.is_none() {
                    if let Some((id, control, instructions, sender)) = st.deferred_compaction.take()
                    {
                        // The run settled: the compaction asked for during it runs now.
                        st.run_id = Some(id);
                        st.running = Some(control.clone());
                        ctl = control;
                        tx = Some(sender);
                        work = Work::Compact(instructions);
                        cfg = st.config.clone();
                        history = outcome.messages.clone();
                        st.last_outcome = Some(outcome);
                        continue;
                    }
                    st.running = None;
                    settled_aborted = outcome.stop_reason == pi_ai::StopReason::Aborted
                        || ctl.cancel.is_cancelled();
                    st.last_outcome = Some(outcome);
                    break;
                }
                // Queued after the last check, or prompted while the run was finishing: run
                // again rather than leave them waiting.
                let prompts;
                (ctl, prompts) = match next {
                    Some((id, control, mut next_prompts)) => {
                        st.run_id = Some(id);
                        let mut all = if queued {
                            outcome.undelivered.clone()
                        } else {
                            std::mem::take(&mut st.pending)
                        };
                        all.append(&mut next_prompts);
                        (control, all)
                    }
                    None => {
                        let control = RunControl::default();
                        control.set_modes(st.modes.0, st.modes.1);
                        st.run_id = Some(uuid::Uuid::now_v7().to_string());
                        (control, outcome.undelivered.clone())
                    }
                };
                work = Work::Prompt(prompts);
                st.running = Some(ctl.clone());
                cfg = st.config.clone();
                history = outcome.messages.clone();
                st.last_outcome = Some(outcome);
            }
            // Pi 1.6's `agent_settled`: nothing more runs on its own. Listeners see the agent
            // idle (no active run); one that starts a run from here keeps it busy.
            if prompted {
                Dispatch {
                    inner: inner.clone(),
                }
                .emit(AgentEvent::AgentSettled {
                    aborted: settled_aborted,
                })
                .await;
            }
            if inner.state.lock().running.is_none() {
                inner.idle.send_replace(true);
            }
        });
        Ok((run_id, control, rx))
    }

    /// The id of the active run, or of the last one.
    pub fn run_id(&self) -> Option<String> {
        self.inner.state.lock().run_id.clone()
    }

    /// Runs `f` on the id of the active run, or of the last one, without copying it (a
    /// listener comparing it per streamed delta).
    pub fn with_run_id<R>(&self, f: impl FnOnce(Option<&str>) -> R) -> R {
        f(self.inner.state.lock().run_id.as_deref())
    }

    /// A handle that does not keep the agent alive (for listeners that need to reach it).
    pub fn downgrade(&self) -> WeakAgent {
        WeakAgent {
            inner: Arc::downgrade(&self.inner),
        }
    }

    /// Queues `message`; with no active run it waits for the next prompt.
    pub fn enqueue(&self, message: Message, how: Delivery) {
        let mut st = self.inner.state.lock();
        match &st.running {
            Some(c) => c.enqueue(message, how),
            None => st.pending.push(message),
        }
    }

    /// Replaces (`Some`) or removes (`None`) the first queued message equal to `target`
    /// before it is delivered, in the active run's queues or, while idle, among the messages
    /// waiting for the next prompt ([`RunControl::replace_queued`]). False when it is no
    /// longer queued.
    pub fn replace_queued(&self, target: &Message, with: Option<Message>) -> bool {
        let mut st = self.inner.state.lock();
        if let Some(c) = &st.running {
            return c.replace_queued(target, with);
        }
        let Some(i) = st.pending.iter().position(|m| m == target) else {
            return false;
        };
        match with {
            Some(m) => st.pending[i] = m,
            None => {
                st.pending.remove(i);
            }
        }
        true
    }

    /// Sets the steering and follow-up queue modes (for this and later runs).
    pub fn set_queue_modes(&self, steering: QueueMode, follow_up: QueueMode) {
        let mut st = self.inner.state.lock();
        st.modes = (steering, follow_up);
        if let Some(c) = &st.running {
            c.set_modes(steering, follow_up);
        }
    }

    /// Aborts the active run; false when there was none or it was already aborted.
    pub fn abort(&self) -> bool {
        let st = self.inner.state.lock();
        if let Some((_, c, _, _)) = &st.deferred_compaction {
            c.cancel.cancel();
        }
        match &st.running {
            Some(c) => {
                let was = !c.cancel.is_cancelled();
                c.cancel.cancel();
                was
            }
            None => false,
        }
    }

    /// Waits, at most [`SETTLE_LIMIT`], for a run whose `agent_end` was already sent to let go
    /// of the agent. The loop settles its state just after that event, so a client acting on
    /// `agent_end` (branch, rewind, label) would otherwise be told the session is still
    /// running. Returns at once when no run is ending: a live run stays a live run, and a
    /// compaction or prompt queued behind the ending run is a run of its own.
    pub async fn settle(&self) {
        let ending = {
            let st = self.inner.state.lock();
            st.running.is_some()
                && st.ending
                && st.next_run.is_none()
                && st.deferred_compaction.is_none()
        };
        if ending {
            let _ = tokio::time::timeout(SETTLE_LIMIT, self.wait_for_idle()).await;
        }
    }

    /// Resolves when no run is active (at once when idle).
    pub async fn wait_for_idle(&self) {
        let mut rx = self.inner.idle.subscribe();
        let _ = rx.wait_for(|idle| *idle).await;
    }

    /// Sends `event` to the listeners as a run's events go (the agent's state takes it
    /// first): for what happens outside a run, as a branch summary's
    /// `summarization_retry_*` events.
    pub async fn tell(&self, event: AgentEvent) {
        Dispatch {
            inner: self.inner.clone(),
        }
        .emit(event)
        .await;
    }

    /// True while a compaction writes its summary (the agent is busy then too).
    pub fn is_compacting(&self) -> bool {
        self.inner.state.lock().compacting
    }

    /// True while a run is active.
    pub fn is_streaming(&self) -> bool {
        self.inner.state.lock().running.is_some()
    }

    /// The conversation: every completed message.
    pub fn messages(&self) -> Vec<Message> {
        self.inner.state.lock().messages.clone()
    }

    /// The number of messages of [`Agent::messages`], without copying them (a resumed long
    /// session holds tens of thousands).
    pub fn message_count(&self) -> usize {
        self.inner.state.lock().messages.len()
    }

    /// The assistant response being streamed, if any.
    pub fn streaming_message(&self) -> Option<AssistantMessage> {
        self.inner
            .state
            .lock()
            .streaming
            .as_mut()
            .map(Follower::snapshot)
    }

    /// Messages waiting for the next prompt.
    pub fn pending(&self) -> Vec<Message> {
        self.inner.state.lock().pending.clone()
    }

    /// The outcome of the last finished run.
    pub fn last_outcome(&self) -> Option<RunOutcome> {
        self.inner.state.lock().last_outcome.clone()
    }

    /// Replaces the conversation (after navigating a session tree, or to add a message
    /// outside a run such as a user-run shell command). Refused while a run is active.
    pub fn set_messages(&self, messages: Vec<Message>) -> Result<(), AgentBusy> {
        let mut st = self.inner.state.lock();
        if st.running.is_some() {
            return Err(AgentBusy);
        }
        st.usage_from = st.usage_from.min(messages.len());
        st.messages = messages;
        Ok(())
    }

    /// [`Agent::set_messages`] for a context built from a session branch: `usage_from` as
    /// [`crate::session::SessionContext::usage_from`] says (messages before it carry usage the
    /// compaction threshold does not anchor on).
    pub fn set_context(&self, messages: Vec<Message>, usage_from: usize) -> Result<(), AgentBusy> {
        let mut st = self.inner.state.lock();
        if st.running.is_some() {
            return Err(AgentBusy);
        }
        st.usage_from = usage_from.min(messages.len());
        st.messages = messages;
        Ok(())
    }

    /// Removes and returns every queued message: the active run's undelivered steering and
    /// follow-ups (steering first), then the messages waiting for the next prompt.
    pub fn take_queued(&self) -> Vec<Message> {
        let mut st = self.inner.state.lock();
        let mut out = st
            .running
            .as_ref()
            .map(|c| {
                let mut v = c.take_undelivered();
                v.extend(c.take_next_turn());
                v
            })
            .unwrap_or_default();
        out.append(&mut st.pending);
        out
    }

    /// The steering and follow-up queue modes.
    pub fn queue_modes(&self) -> (QueueMode, QueueMode) {
        self.inner.state.lock().modes
    }

    /// The configuration later runs use.
    pub fn config(&self) -> AgentConfig {
        self.inner.state.lock().config.clone()
    }

    /// Reads the configuration without copying it (a clone holds the tools, hooks and system
    /// prompt: [`Agent::config`] is for callers that keep it).
    pub fn with_config<R>(&self, f: impl FnOnce(&AgentConfig) -> R) -> R {
        f(&self.inner.state.lock().config)
    }

    /// Replaces the configuration for later runs (model, tools, hooks…).
    pub fn set_config(&self, config: AgentConfig) {
        let mut st = self.inner.state.lock();
        st.config = config;
        st.config_generation = next_config_generation();
    }

    /// The number naming the configuration later runs use: a new one, unique in the process,
    /// at every [`Agent::set_config`] (and for every agent), so what a caller derived from the
    /// configuration can be known to still hold without deriving it again (the session's
    /// stored system message: `harness::recorder::store_system`).
    pub fn config_generation(&self) -> u64 {
        self.inner.state.lock().config_generation
    }

    /// Whether a prompt's run would compact before the prompt joins the context (Pi 1.6's
    /// `_prepareRun`: [`super::run::last_answer_past_threshold`] on the agent's context and
    /// configuration, an aborted last answer counted). The session stores the run's system
    /// message after that compaction, not before it.
    pub fn compacts_before_prompt(&self) -> bool {
        let st = self.inner.state.lock();
        super::run::last_answer_past_threshold(
            &st.config,
            &st.messages,
            st.usage_from,
            true,
            || {
                let specs: Vec<pi_ai::ToolSpec> =
                    st.config.tools.iter().map(|t| t.spec()).collect();
                crate::compaction::tools_chars(&specs)
            },
        )
    }

    /// [`Agent::with_config`] with the configuration's number ([`Agent::config_generation`]),
    /// read together.
    pub fn with_config_generation<R>(&self, f: impl FnOnce(&AgentConfig, u64) -> R) -> R {
        let st = self.inner.state.lock();
        f(&st.config, st.config_generation)
    }
}

/// A copy of `messages` with room for 64 more (what a turn or two appends) before it grows.
fn with_room(messages: &[Message]) -> Vec<Message> {
    let mut out = Vec::with_capacity(messages.len() + 64);
    out.extend_from_slice(messages);
    out
}

/// The agent as a sink: an event emitted to it reaches its listeners as [`Agent::tell`]
/// tells it (what a session tells outside a run: a branch summary's retries).
#[async_trait]
impl EventSink for Agent {
    async fn emit(&self, event: AgentEvent) {
        self.tell(event).await;
    }
}

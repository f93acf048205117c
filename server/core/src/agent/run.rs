//! The loop itself: turns, the trust boundary per call, batches (see the module docs of
//! [`crate::agent`]).

use std::sync::Arc;

use futures::stream::{FuturesUnordered, StreamExt};
use futures::FutureExt as _;
use pi_ai::{
    pi_output_limit, AssistantEvent, AssistantMessage, Context, Message, StopReason, StreamOptions,
    ToolCall, ToolResultMessage, ToolSpec,
};
use serde_json::Value;

use super::{
    AfterToolCall, AgentConfig, AgentEvent, BeforeToolCall, CompactionConfig, CompactionError,
    CompactionProposal, CompactionReason, CompactionResult, EventSink, NextTurn, Queue,
    RetrySettings, RunControl, RunOutcome, SummarySource, Tool, ToolContext, ToolError,
    ToolExecution, ToolOutput, ABORTED_TEXT, ABORT_GRACE, FAILED_RESPONSE_TEXT, LENGTH_LIMIT_TEXT,
    MIN_OUTPUT_TOKENS, OPERATION_ABORTED_TEXT, UNFINISHED_ARGUMENTS_TEXT,
};

mod blocked_images;
mod length_recovery;

pub use length_recovery::{is_recoverable_length, TRUNCATED_RECOVERY_FAILED};

/// Pi 1.6's `compaction_end` when the one compact-and-retry of a user turn was used and
/// another overflow (or recoverable `length` stop) comes: no compaction, `error_message` said.
fn recovery_failed(error_message: &str) -> AgentEvent {
    AgentEvent::CompactionEnd {
        reason: CompactionReason::Overflow,
        result: None,
        aborted: false,
        will_retry: false,
        error_message: Some(error_message.into()),
        context: None,
    }
}

/// Pi's text when a second overflow comes after one compact-and-retry.
pub const OVERFLOW_RECOVERY_FAILED: &str = "Context overflow recovery failed after one compact-and-retry attempt. Try reducing context or switching to a larger-context model.";

/// The `errorMessage` of a failed compaction, prefixed as Pi does.
fn compaction_error_text(reason: CompactionReason, e: &CompactionError) -> String {
    match reason {
        CompactionReason::Overflow => format!("Context overflow recovery failed: {e}"),
        CompactionReason::Threshold => format!("Auto-compaction failed: {e}"),
        CompactionReason::Manual => format!("Compaction failed: {e}"),
    }
}

/// `cc`'s settings with the kept tail's budget fitted under the threshold beside the summary
/// (cases CTX-03 / CMP-02; [`crate::compaction::keep_budget`]), `fixed` tokens of system
/// prompt and tool specs beside it.
fn kept_settings(
    cc: &CompactionConfig,
    model: &pi_ai::Model,
    fixed: u64,
) -> crate::compaction::CompactionSettings {
    let mut settings = cc.settings;
    settings.keep_recent_tokens = crate::compaction::keep_budget(
        settings.keep_recent_tokens,
        model.context_window,
        settings.reserve_tokens,
        fixed,
    );
    settings
}

/// Proposes a compaction and commits it; an automatic one only when it shrinks the request
/// (`before` tokens) and, for a threshold compaction, brings it under context window − reserve
/// (case CMP-04). A manual compaction is committed as Pi commits it.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn compact_checked(
    cc: &CompactionConfig,
    model: &pi_ai::Model,
    system_prompt: &str,
    specs: &[ToolSpec],
    instructions: Option<&str>,
    history: &[Message],
    reason: CompactionReason,
    retry: &RetrySettings,
    sink: &dyn EventSink,
    cancel: &tokio_util::sync::CancellationToken,
) -> Result<(CompactionProposal, Vec<Message>), CompactionError> {
    // Both sides estimated the same way (provider usage describes the old context only).
    let estimate =
        |m: &[Message]| crate::compaction::request_tokens(system_prompt, specs, m, usize::MAX);
    // The system prompt and tool specs, counted on both sides.
    let fixed = estimate(&[]);
    let settings = kept_settings(cc, model, fixed);
    let events = SummaryRetryEvents {
        sink,
        source: SummarySource::Compaction,
        reason: Some(reason),
    };
    let retry = crate::compaction::SummaryRetry {
        policy: retry.enabled.then_some(&retry.policy),
        listener: Some(&events),
    };
    let proposal = cc
        .compactor
        .propose(model, &settings, instructions, retry, cancel)
        .await?;
    let before = estimate(history);
    let after = estimate(&proposal.messages);
    // A compaction the user asked for is done as Pi does it, whatever it saves; an automatic
    // one must make room or it would repeat (case CMP-04).
    if reason != CompactionReason::Manual && after >= before {
        return Err(CompactionError::NoProgress {
            before: before - fixed.min(before),
            after: after - fixed.min(after),
            fixed,
            keep_recent_tokens: settings.keep_recent_tokens,
        });
    }
    let limit = crate::compaction::threshold(model.context_window, cc.settings.reserve_tokens);
    if reason == CompactionReason::Threshold && model.context_window > 0 && after > limit {
        return Err(CompactionError::DoesNotFit { after, limit });
    }
    if cancel.is_cancelled() {
        return Err(CompactionError::Cancelled);
    }
    let messages = cc.compactor.commit(&proposal)?;
    Ok((proposal, messages))
}

/// Pi 1.6's threshold check of a context's last answer (`_checkCompaction`, case 3, as
/// `_prepareRun` runs it before a prompt and `_handlePostAgentRun` after a run): true when
/// automatic compaction is on, the window is known and the last assistant message of
/// `messages` (an aborted one only with `with_aborted`) puts the context past context window
/// − reserve ([`crate::compaction::should_compact`]). Its context is its usage total (Pi's
/// `calculateContextTokens`) when it answered after the context's last change (`usage_from`:
/// a compaction or `context_edit` before it) without failing; else the estimate of the whole
/// request ([`crate::compaction::request_tokens_counted`], anchored on usage after
/// `usage_from` only). `specs_chars` gives the tool declarations' characters when the
/// estimate needs them. No assistant message: false (nothing answered yet).
pub(crate) fn last_answer_past_threshold(
    cfg: &AgentConfig,
    messages: &[Message],
    usage_from: usize,
    with_aborted: bool,
    specs_chars: impl FnOnce() -> u64,
) -> bool {
    let Some(cc) = cfg.compaction.as_ref().filter(|c| c.settings.enabled) else {
        return false;
    };
    let window = cfg.model.context_window;
    if window == 0 {
        return false;
    }
    let Some((i, a)) = messages
        .iter()
        .enumerate()
        .rev()
        .find_map(|(i, m)| match m {
            Message::Assistant(a) => Some((i, a)),
            _ => None,
        })
    else {
        return false;
    };
    if !with_aborted && a.stop_reason == StopReason::Aborted {
        return false;
    }
    let total = a.usage.context_total();
    let tokens = if i >= usage_from && a.stop_reason != StopReason::Error && total > 0 {
        total
    } else {
        crate::compaction::request_tokens_counted(
            &cfg.system_prompt,
            specs_chars(),
            messages,
            usage_from,
        )
    };
    crate::compaction::should_compact(tokens, window, cc.settings.reserve_tokens)
}

/// A summary request's retries told as events of `sink` (Pi 1.6's
/// `_summarizationRetryCallbacks`: `summarization_retry_scheduled`,
/// `summarization_retry_attempt_start` with `source` and the compaction's `reason`,
/// `summarization_retry_finished`).
pub struct SummaryRetryEvents<'a> {
    /// Where the events go.
    pub sink: &'a dyn EventSink,
    /// What the summary is for.
    pub source: SummarySource,
    /// The compaction's reason (`None` for a branch summary).
    pub reason: Option<CompactionReason>,
}

#[async_trait::async_trait]
impl crate::compaction::SummaryRetryListener for SummaryRetryEvents<'_> {
    async fn scheduled(&self, attempt: u32, max_attempts: u32, delay_ms: u64, error_message: &str) {
        self.sink
            .emit(AgentEvent::SummarizationRetryScheduled {
                attempt,
                max_attempts,
                delay_ms,
                error_message: error_message.to_string(),
            })
            .await;
    }

    async fn attempt_start(&self) {
        self.sink
            .emit(AgentEvent::SummarizationRetryAttemptStart {
                source: self.source,
                reason: self.reason,
            })
            .await;
    }

    async fn finished(&self) {
        self.sink.emit(AgentEvent::SummarizationRetryFinished).await;
    }
}

/// Base64 length over which an image is replaced after a size refusal: 5 MB, Anthropic's
/// per-image limit (the smallest of the providers').
pub const LARGE_IMAGE_BASE64: usize = 5 * 1024 * 1024;

/// The text that takes an image's place in the request after the provider refused it.
pub fn image_note(image: &pi_ai::ImageContent) -> String {
    format!(
        "[image removed: the provider refused a request with this {} image ({} KB) as too large]",
        image.mime_type,
        image.data.len() * 3 / 4 / 1024
    )
}

/// Replaces images over [`LARGE_IMAGE_BASE64`] in user messages and tool results by
/// [`image_note`]; when none is that large (a refusal for its pixels), every image. Returns
/// the images replaced.
fn replace_large_images(messages: &mut [Message]) -> Vec<crate::agent::ReplacedImage> {
    fn blocks(m: &mut Message) -> Option<&mut Vec<pi_ai::ContentBlock>> {
        match m {
            Message::User(u) => match &mut u.content {
                pi_ai::UserContent::Blocks(b) => Some(b),
                pi_ai::UserContent::Text(_) => None,
            },
            Message::ToolResult(r) => Some(&mut r.content),
            Message::Assistant(_) | Message::System(_) => None,
        }
    }
    let mut replace = |limit: usize| {
        let mut done: Vec<crate::agent::ReplacedImage> = Vec::new();
        for m in messages.iter_mut() {
            if let Some(bs) = blocks(m) {
                for b in bs.iter_mut() {
                    if let pi_ai::ContentBlock::Image(i) = b {
                        if i.data.len() > limit {
                            let note = image_note(i);
                            let hash = crate::session::image_hash(&i.data);
                            if !done.iter().any(|d| d.hash == hash) {
                                done.push(crate::agent::ReplacedImage {
                                    hash,
                                    mime_type: i.mime_type.clone(),
                                    note: note.clone(),
                                });
                            }
                            *b = pi_ai::ContentBlock::text(note);
                        }
                    }
                }
            }
        }
        done
    };
    match replace(LARGE_IMAGE_BASE64) {
        none if none.is_empty() => replace(0),
        some => some,
    }
}

/// A tool with its spec and compiled argument schema, built once per run.
struct ToolEntry {
    tool: Arc<dyn Tool>,
    spec: ToolSpec,
    /// Compiled on the tool's first call of the run (compiling every tool's schema up front
    /// cost a run more CPU than its tool rounds when one or two tools are called).
    validator: std::sync::OnceLock<crate::validate::ArgumentValidator>,
    /// For the approval policy.
    kind: crate::approval::ToolKind,
    /// Shown in the approval question.
    note: Option<String>,
}

impl ToolEntry {
    fn new(t: &Arc<dyn Tool>) -> ToolEntry {
        let spec = t.spec();
        ToolEntry {
            tool: t.clone(),
            validator: std::sync::OnceLock::new(),
            kind: t.approval_kind(),
            note: t.approval_note(),
            spec,
        }
    }
}

/// A call that passed the trust boundary and is ready to execute.
struct Prepared {
    index: usize,
    tool: Arc<dyn Tool>,
    args: Value,
}

/// A tool future's outcome: its result, or the panic it raised.
type Joined = Result<Result<ToolOutput, ToolError>, Box<dyn std::any::Any + Send>>;

/// Where a change-making call's outcome meets the run (see [`super::LateResults`]).
enum LateSlot {
    /// Still running; the run waits.
    Pending,
    /// Settled; the run takes it.
    Done(Joined),
    /// The run stopped waiting: the call's task hands its outcome to the late side.
    Abandoned,
}

impl LateSlot {
    /// The outcome, when it is in (taken).
    fn take_done(&mut self) -> Option<Joined> {
        match std::mem::replace(self, LateSlot::Pending) {
            LateSlot::Done(j) => Some(j),
            other => {
                *self = other;
                None
            }
        }
    }

    /// Gives up waiting: the outcome when it is already in, else `None` (the slot is
    /// `Abandoned` then).
    fn abandon(&mut self) -> Option<Joined> {
        match std::mem::replace(self, LateSlot::Abandoned) {
            LateSlot::Done(j) => Some(j),
            _ => None,
        }
    }
}

/// A call's final outcome.
struct Finalized {
    output: ToolOutput,
    is_error: bool,
    /// How long the tool ran, in milliseconds (Pi 1.6's `durationMs`); `None` when it never
    /// ran.
    duration_ms: Option<u64>,
}

impl Finalized {
    /// The error result of a call that never ran (Pi 1.6's immediate results: no
    /// `durationMs`).
    fn refused<T: Into<String>>(text: T) -> Finalized {
        Finalized {
            output: ToolOutput::error(text, None),
            is_error: true,
            duration_ms: None,
        }
    }
}

/// Milliseconds since `t`, rounded as Pi 1.6's `Math.round(performance.now() - startedAt)`.
fn millis_since(t: std::time::Instant) -> u64 {
    let ms = t.elapsed().as_secs_f64() * 1000.0;
    // Finite and not negative: the cast saturates at u64::MAX.
    ms.round() as u64
}

struct Run<'a> {
    cfg: AgentConfig,
    tools: Vec<ToolEntry>,
    /// The tools' specs as sent to the model (lent to each request).
    specs: Vec<ToolSpec>,
    /// Their characters as the token estimate counts them ([`crate::compaction::tools_chars`]),
    /// counted again only when the specs change.
    specs_chars: u64,
    /// The number naming `specs` as they are ([`StreamOptions::tools_generation`]): a new one
    /// whenever they change, so the request cache takes them as the previous request's
    /// without comparing them.
    specs_generation: u64,
    /// How many of `tools` are the configuration's (the rest came from `dynamic_tools`).
    static_tools: usize,
    /// The typed failure of the last response, when it failed.
    last_failure: Option<pi_ai::errors::ProviderError>,
    control: &'a RunControl,
    sink: &'a dyn EventSink,
    messages: Vec<Message>,
    /// The messages this run added, as their events carried them (for its `agent_end`).
    new_messages: Vec<Arc<Message>>,
    /// Assistant requests made so far in this run.
    turn: usize,
    /// Messages before this index carry usage of a context that has changed since (a
    /// compaction, an edit of the context: [`crate::session::SessionContext::usage_from`]).
    usage_from: usize,
    /// A threshold compaction ran since the last user message (at most one per user turn,
    /// case CMP-04).
    compacted_this_turn: bool,
    /// The one overflow (or recoverable `length`) recovery of this user turn was used (Pi's
    /// `_overflowRecoveryAttempted`).
    overflow_recovered: bool,
    /// The last answer (an overflow error, a recoverable `length` stop) was left out of the
    /// context and the compaction that was to make room failed: the run ends there, without
    /// a second `turn_end` and without results for the answer's tool calls, as Pi 1.6's
    /// recovery runs after its agent loop ended (`_checkCompaction`; [`length_recovery`]).
    attempt_left_out: bool,
    /// The run's `agent_end` was sent and no run followed it (a recovery's attempt left out
    /// and no compaction made room for a retry): the run does not send another.
    agent_end_sent: bool,
    /// Sent after the run's `agent_end`: the `compaction_end` saying the one recovery was
    /// used (Pi 1.6's `_checkCompaction` runs after its agent loop ended).
    after_end: Option<AgentEvent>,
    /// Images were replaced by notes after a refusal for their size (once per run).
    images_dropped: bool,
    /// What the last request left for the next one of this run to reuse (its serialised
    /// history; `openai-completions`), so a tool round does not re-serialise the whole history.
    request_cache: std::sync::Arc<pi_ai::api::openai_completions::RequestCache>,
    /// What this run knows of `messages` since it last looked (cleared by every change to
    /// them that is not an append: [`Run::history_changed`]).
    seen: Seen,
}

/// The next request's output limit and the figures behind it ([`Run::output_room`]), in
/// tokens.
#[derive(Debug, Clone, Copy)]
struct OutputRoom {
    /// What the request asks for at most.
    limit: u64,
    /// The input: the lower of Pi 1.6's estimate (its clamp's) and the threshold's
    /// ([`Run::request_tokens`]).
    input: u64,
    /// The window less the input: what an answer can take at all.
    fits: u64,
    /// The least a response needs ([`MIN_OUTPUT_TOKENS`], or the model's smaller limit).
    floor: u64,
}

/// What a run counted of its context and still holds while the context only grows: a tool
/// round then counts and compares its new messages, not the whole history again.
#[derive(Debug, Default, Clone, Copy)]
struct Seen {
    /// How many leading messages are, unchanged, those this run's earlier requests were
    /// given ([`StreamOptions::history_kept`]; 0: none or not known).
    sent: usize,
    /// Pi 1.6's estimate of the messages counted so far ([`PiContext`]): its anchor and the
    /// tail after it, so the output limit of a tool round counts only the new messages.
    pi: PiContext,
    /// `(generation, tokens)`: Pi 1.6's estimate of the tool declarations of
    /// [`Run::specs_generation`] (used when no message anchors the estimate).
    pi_tools: Option<(u64, u64)>,
}

impl Run<'_> {
    /// Forgets what was counted of `messages`: called after every change to them that is
    /// not an append (a retry's or an overflow's pop, images replaced, compaction, a hook's
    /// change).
    fn history_changed(&mut self) {
        self.seen = Seen::default();
    }

    async fn push(&mut self, m: Message) {
        if matches!(m, Message::User(_)) {
            self.compacted_this_turn = false;
            self.overflow_recovered = false;
        }
        // One message for both events, the listeners and the run's `agent_end`; the history
        // keeps its own.
        self.messages.push(m.clone());
        let m = Arc::new(m);
        self.sink
            .emit(AgentEvent::MessageStart { message: m.clone() })
            .await;
        self.sink
            .emit(AgentEvent::MessageEnd { message: m.clone() })
            .await;
        self.new_messages.push(m);
    }

    fn tool(&self, name: &str) -> Option<&ToolEntry> {
        self.tools.iter().find(|t| t.spec.name == name)
    }

    /// Takes the dynamic tools as they are now (see [`super::ToolProvider`]).
    async fn refresh_tools(&mut self) {
        let Some(p) = self.cfg.dynamic_tools.clone() else {
            return;
        };
        let now = p.tools().await;
        let mut old: Vec<ToolEntry> = self.tools.drain(self.static_tools..).collect();
        // The specs (each tool's JSON schema) are copied again only when the tools changed:
        // most rounds of a run see the same tools in the same order.
        let mut changed = false;
        for t in now {
            let name = t.spec().name;
            if self.tools.iter().any(|e| e.spec.name == name) {
                continue;
            }
            match old
                .iter()
                .position(|e| e.spec.name == name && Arc::ptr_eq(&e.tool, &t))
            {
                Some(i) => {
                    changed |= i != 0;
                    self.tools.push(old.remove(i));
                }
                None => {
                    changed = true;
                    self.tools.push(ToolEntry::new(&t));
                }
            }
        }
        if changed || !old.is_empty() || self.specs.len() != self.tools.len() {
            self.specs = self.tools.iter().map(|t| t.spec.clone()).collect();
            self.specs_chars = crate::compaction::tools_chars(&self.specs);
            self.specs_generation = pi_ai::next_tools_generation();
        }
    }

    async fn assistant(&mut self) -> AssistantMessage {
        self.turn += 1;
        self.refresh_tools().await;
        if let Some(h) = self.cfg.hooks.clone() {
            let mut next = NextTurn::new(
                std::mem::take(&mut self.messages),
                self.cfg.model.clone(),
                self.cfg.system_prompt.clone(),
            );
            h.prepare_next_turn(&mut next).await;
            if next.messages_changed() {
                self.history_changed();
            }
            (self.messages, self.cfg.model, self.cfg.system_prompt) = next.into_parts();
        }
        // Pi 1.6's `clampMaxTokensToContext`: at most what its estimate of the input leaves
        // below the window with its margin ([`pi_output_limit`]).
        let output_room = self.output_room().map(|r| r.limit);
        // Pi 1.6: a model that takes system messages mid-conversation gets the stored prompt
        // patches at their place, after the prompt the conversation started with.
        let layout = match &self.cfg.system_messages {
            Some(s) if self.cfg.model.supports_mid_convo_system_messages() => {
                s.layout(&self.cfg.system_prompt, self.messages.len())
            }
            _ => None,
        };
        let mut later_system = false;
        let (system_prompt, kept_prompt) = match layout {
            Some((leading, later)) => {
                for (k, (at, m)) in later.into_iter().enumerate() {
                    let at = (at + k).min(self.messages.len());
                    self.messages.insert(at, Message::System(m));
                    later_system = true;
                }
                (leading, Some(std::mem::take(&mut self.cfg.system_prompt)))
            }
            // Pi 1.6 sends the prompt its stored system messages replay to: the same sections,
            // each where it was first stored.
            None => match self
                .cfg
                .system_messages
                .as_ref()
                .and_then(|s| s.replayed(&self.cfg.system_prompt))
            {
                Some(replayed) => (replayed, Some(std::mem::take(&mut self.cfg.system_prompt))),
                None => (std::mem::take(&mut self.cfg.system_prompt), None),
            },
        };
        // What the request cache may take as the previous request's without comparing: none
        // when system messages were placed between the run's own.
        let history_kept = if later_system { 0 } else { self.seen.sent };
        // Settings' `images.blockImages` (Pi 1.6's `convertToLlm` wrapper): the request sends
        // a note in each image's place, the same for every request of the run; the run's
        // messages get their images back once the request is built.
        let blocked = if self.cfg.block_images {
            blocked_images::block(&mut self.messages)
        } else {
            Vec::new()
        };
        // The request is built synchronously from the context, so the system prompt, messages
        // and tool specs are lent to it and taken back instead of copied for every request.
        let context = Context {
            system_prompt,
            messages: std::mem::take(&mut self.messages),
            tools: std::mem::take(&mut self.specs),
        };
        // A run aborted before its first request (during the compaction before the prompt).
        let aborted_before_run = self.turn == 1 && self.control.cancel.is_cancelled();
        let mut stream = pi_ai::stream(
            &self.cfg.model,
            &context,
            StreamOptions {
                cancel: self.control.cancel.child_token(),
                session_id: self.cfg.session_id.clone(),
                max_tokens: None,
                output_room,
                timeout: self.cfg.retry.provider_timeout,
                request_cache: Some(self.request_cache.clone()),
                history_kept,
                tools_generation: self.specs_generation,
                cache_retention: None,
            },
        );
        // The cache now holds this request's history; the next request's starts with it
        // unless something other than an append changes `messages` meanwhile.
        self.seen.sent = if later_system {
            0
        } else {
            context.messages.len()
        };
        self.cfg.system_prompt = kept_prompt.unwrap_or(context.system_prompt);
        self.messages = context.messages;
        blocked_images::restore(&mut self.messages, blocked);
        if later_system {
            self.messages.retain(|m| !matches!(m, Message::System(_)));
            self.history_changed();
        }
        self.specs = context.tools;
        let model = &self.cfg.model;
        let mut started = false;
        // Pi 1.6's pi-ai starts a message once the provider answered: a request refused before
        // anything streamed has one `message_start`, with its error. The stream's `Start` is
        // told with the event after it.
        let mut start_held = false;
        let mut last = None;
        while let Some(ev) = stream.next().await {
            // The terminal event's message is taken, not copied: the event goes no further.
            match ev {
                AssistantEvent::Done { message, .. } => {
                    last = Some(message);
                    self.last_failure = None;
                    break;
                }
                AssistantEvent::Error { error, failure, .. } => {
                    last = Some(error);
                    self.last_failure = Some(failure);
                    break;
                }
                _ => {}
            }
            if let AssistantEvent::Start = ev {
                start_held = true;
                continue;
            }
            if std::mem::take(&mut start_held) {
                started = true;
                self.sink
                    .emit(AgentEvent::MessageStart {
                        message: Arc::new(Message::Assistant(pending(model))),
                    })
                    .await;
            }
            self.sink
                .emit(AgentEvent::MessageUpdate {
                    assistant_message_event: ev,
                })
                .await;
        }
        let mut message = last.unwrap_or_else(|| {
            let mut m = AssistantMessage::empty(model.api.as_str(), &model.provider, &model.id);
            m.stop_reason = StopReason::Error;
            m.error_message = Some("model stream ended without a result".into());
            m
        });
        if message.api.is_empty() {
            message.api = model.api.to_string();
            message.provider = model.provider.clone();
            message.model = model.id.clone();
        }
        if aborted_before_run && message.stop_reason == StopReason::Aborted {
            // Pi 1.6 words it as its request's setup fails (`SETUP_ABORTED_TEXT`).
            message.error_message = Some(pi_ai::errors::SETUP_ABORTED_TEXT.to_string());
        }
        // Pi 1.6's agent loop stamps the level the request asked for on the finished message.
        message.thinking_level = Some(
            model
                .thinking_level
                .map_or("off", |l| l.as_str())
                .to_string(),
        );
        let m = Message::Assistant(message.clone());
        self.messages.push(m.clone());
        let m = Arc::new(m);
        if !started {
            // An answer that streamed nothing but its end starts `pending` as any other; a
            // failure before anything streamed starts as the failed message.
            let start = if start_held && message.stop_reason != StopReason::Error {
                Arc::new(Message::Assistant(pending(model)))
            } else {
                m.clone()
            };
            self.sink
                .emit(AgentEvent::MessageStart { message: start })
                .await;
        }
        self.sink
            .emit(AgentEvent::MessageEnd { message: m.clone() })
            .await;
        self.new_messages.push(m);
        message
    }

    /// Proposes a compaction, checks it (it must shrink the context; a threshold compaction must
    /// also fit under the threshold) and commits it; emits `compaction_start` / `compaction_end`.
    /// Returns the error text of a compaction that could not be done. With nothing to compact
    /// ([`crate::compaction::Compactor::check`]) it returns that error and emits nothing.
    async fn compact(&mut self, reason: CompactionReason) -> Result<(), CompactionError> {
        let Some(cc) = self.cfg.compaction.clone() else {
            return Err(CompactionError::NothingToCompact);
        };
        // Pi 1.6's `_runAutoCompaction` (threshold and overflow alike): when
        // `prepareCompaction` prepares nothing, no compaction starts and no event tells of one.
        let fixed = crate::compaction::request_tokens(
            &self.cfg.system_prompt,
            &self.specs,
            &[],
            usize::MAX,
        );
        cc.compactor
            .check(&kept_settings(&cc, &self.cfg.model, fixed))?;
        self.sink.emit(AgentEvent::CompactionStart { reason }).await;
        let result = compact_checked(
            &cc,
            &self.cfg.model,
            &self.cfg.system_prompt,
            &self.specs,
            None,
            &self.messages,
            reason,
            &self.cfg.retry,
            self.sink,
            &self.control.cancel,
        )
        .await;
        match result {
            Ok((proposal, messages)) => {
                self.messages = messages;
                self.history_changed();
                self.usage_from = self.messages.len();
                self.sink
                    .emit(AgentEvent::CompactionEnd {
                        reason,
                        result: Some(proposal.result),
                        aborted: false,
                        will_retry: reason == CompactionReason::Overflow,
                        error_message: None,
                        context: Some(self.messages.clone()),
                    })
                    .await;
                Ok(())
            }
            Err(e) => {
                let aborted = matches!(e, CompactionError::Cancelled);
                self.sink
                    .emit(AgentEvent::CompactionEnd {
                        reason,
                        result: None,
                        aborted,
                        will_retry: false,
                        error_message: (!aborted).then(|| compaction_error_text(reason, &e)),
                        context: None,
                    })
                    .await;
                Err(e)
            }
        }
    }

    /// Leaves the failed attempt `a` (the context's last message: an overflow error, a
    /// recoverable `length` stop) out of the context and compacts for the retry, as Pi 1.6's
    /// `_checkCompaction` after its agent loop ended: ends its turn (`turn_end`) and its run
    /// (`agent_end` with the run's messages so far), pops it (it stays in the session;
    /// [`AgentEvent::AttemptLeftOut`]: the recorder writes its `context_edit`) and compacts
    /// with reason `overflow` (no compaction events when there is nothing to compact). A
    /// compaction that was done starts the retry as a new run (`agent_start`, `turn_start`:
    /// Pi's `agent.continue()`). A failed compaction does not put the attempt back: the live
    /// context stays as the file's, and the run is over (its `agent_end` was sent).
    async fn leave_out_and_compact(&mut self, a: &AssistantMessage) -> Result<(), CompactionError> {
        self.sink
            .emit(AgentEvent::TurnEnd {
                message: Arc::new(Message::Assistant(a.clone())),
                tool_results: Vec::new(),
            })
            .await;
        self.sink
            .emit(AgentEvent::AgentEnd {
                messages: std::mem::take(&mut self.new_messages),
                will_retry: false,
            })
            .await;
        self.agent_end_sent = true;
        self.messages.pop();
        self.history_changed();
        self.sink.emit(AgentEvent::AttemptLeftOut).await;
        self.compact(CompactionReason::Overflow).await?;
        self.restart().await;
        Ok(())
    }

    /// Starts the retry of a run that ended for it (a compaction's or a transient failure's)
    /// as a new run: `agent_start`, `turn_start` (Pi 1.6's `agent.continue()`).
    async fn restart(&mut self) {
        self.agent_end_sent = false;
        self.sink.emit(AgentEvent::AgentStart).await;
        self.sink.emit(AgentEvent::TurnStart).await;
    }

    /// Tokens of the next request (see [`crate::compaction::request_tokens`]).
    fn request_tokens(&self) -> u64 {
        crate::compaction::request_tokens_counted(
            &self.cfg.system_prompt,
            self.specs_chars,
            &self.messages,
            self.usage_from,
        )
    }

    /// pi-ai 1.6's `estimateContextTokens` of the next request's context: the usage total of
    /// its anchor plus the estimates of the messages after it ([`PiContext`]), or without an
    /// anchor the estimates of the system prompt, the tool declarations and every message.
    /// Only the messages appended since the last call are read ([`Seen::pi`]); the tool
    /// declarations' part is kept per [`Run::specs_generation`]. With an anchor, the system
    /// messages the session stored after it count too (Pi 1.6's agent context holds them:
    /// the full prompt a run stores on a resumed file that had none, or a configuration's
    /// patch), as [`super::SystemMessages::tokens_after`] estimates them.
    fn pi_context_tokens(&mut self) -> u64 {
        let mut pi = self.seen.pi;
        if pi.scanned > self.messages.len() {
            pi = PiContext::default();
        }
        pi.advance(&self.messages);
        self.seen.pi = pi;
        if let Some((at, total)) = pi.anchor {
            let after = self.messages.len().saturating_sub(at + 1);
            let stored = self
                .cfg
                .system_messages
                .as_ref()
                .map_or(0, |s| s.tokens_after(after));
            return total + pi.tail + stored;
        }
        let tools = match self.seen.pi_tools {
            Some((generation, tokens)) if generation == self.specs_generation => tokens,
            _ => {
                let tokens = pi_tools_tokens(&self.specs);
                self.seen.pi_tools = Some((self.specs_generation, tokens));
                tokens
            }
        };
        pi_tokens(js_len(&self.cfg.system_prompt)) + tools + pi.tail
    }

    /// The output limit of the next request and what the window guard reads, in tokens
    /// (`None` when the window is unknown). The limit is Pi 1.6's (`clampMaxTokensToContext`,
    /// [`pi_output_limit`]: what the input leaves below the window after a margin of at least
    /// 4,096) while that is at least the floor ([`MIN_OUTPUT_TOKENS`], or the model's smaller
    /// limit); below it, the floor when the window still holds it beside the input (Pi 1.6
    /// asks for what is left after its margin, down to 1 token: no usable answer on a window
    /// of 8,000 once 3,000 are used). The input beside which the floor must fit is the lower
    /// of Pi's estimate ([`Self::pi_context_tokens`]) and the threshold's
    /// ([`Self::request_tokens`], which puts aside usage from before a change of the context).
    /// The guard ([`Self::ensure_output_room`]) refuses when not even the floor fits.
    fn output_room(&mut self) -> Option<OutputRoom> {
        let window = self.cfg.model.context_window;
        if window == 0 {
            return None;
        }
        let pi = self.pi_context_tokens();
        // What fits is judged by the lower of Pi's estimate and the threshold's (characters /
        // 4 after the latest usage that still counts: usage from before a compaction or a
        // `context_edit` does not, where pi-ai's estimate still anchors on it).
        let input = pi.min(self.request_tokens());
        let floor = MIN_OUTPUT_TOKENS.min(self.cfg.model.default_max_tokens());
        let clamp = pi_output_limit(window, pi);
        let fits = window.saturating_sub(input);
        let limit = if clamp >= floor || fits < floor {
            clamp
        } else {
            floor
        };
        Some(OutputRoom {
            limit,
            input,
            fits,
            floor,
        })
    }

    /// Case 18.10: a request asks for at most the room its context leaves
    /// ([`Self::output_room`]); when the window does not hold the floor beside the input
    /// ([`MIN_OUTPUT_TOKENS`], or the model's own smaller limit) the context is compacted
    /// first (once per user turn), and if there is still no room the turn fails with the
    /// figures instead of sending a request that cannot fit. (Pi 1.6 sends it with
    /// `max_tokens` 1; refusing it is a deliberate difference.)
    async fn ensure_output_room(&mut self) -> Result<(), String> {
        let Some(room) = self.output_room() else {
            return Ok(());
        };
        if room.fits >= room.floor {
            return Ok(());
        }
        let can_compact = self
            .cfg
            .compaction
            .as_ref()
            .is_some_and(|c| c.settings.enabled)
            && !self.compacted_this_turn;
        if can_compact {
            self.compacted_this_turn = true;
            if let Err(CompactionError::Cancelled) = self.compact(CompactionReason::Threshold).await
            {
                return Ok(());
            }
            if self.output_room().is_some_and(|r| r.fits >= r.floor) {
                return Ok(());
            }
        }
        let Some(OutputRoom {
            input, fits, floor, ..
        }) = self.output_room()
        else {
            return Ok(());
        };
        let window = self.cfg.model.context_window;
        Err(format!(
            "The context (estimated at {input} tokens) leaves room for {fits} output tokens in the model's {window}-token window, less than the {floor} tokens a response needs. Compact the session, start a new one, or switch to a model with a larger context window."
        ))
    }

    /// The threshold check between the turns of a run (case CTX-03), where Pi 1.6 runs it
    /// (`prepareNextTurn` → `_compactBeforeNextAssistantResponse`): after a turn's `turn_end`,
    /// before the next `turn_start` and before steering or follow-up messages join the
    /// context. Compacts once per user turn when context tokens pass context window −
    /// reserve. `Err` ends the run: the compaction failed and the context does not fit the
    /// window. (Before a prompt and after a run: [`last_answer_past_threshold`].)
    async fn compact_if_due(&mut self) -> Result<(), String> {
        let Some(cc) = &self.cfg.compaction else {
            return Ok(());
        };
        let window = self.cfg.model.context_window;
        if !cc.settings.enabled || window == 0 || self.compacted_this_turn {
            return Ok(());
        }
        let tokens = self.request_tokens();
        // Due above the threshold (`compaction::should_compact`).
        let limit = crate::compaction::threshold(window, cc.settings.reserve_tokens);
        if tokens <= limit {
            return Ok(());
        }
        self.compacted_this_turn = true;
        match self.compact(CompactionReason::Threshold).await {
            Ok(()) => Ok(()),
            // A failed or cancelled summary request appends nothing; the request still goes
            // out (an abort ends it at once).
            Err(
                CompactionError::SummaryFailed(_)
                | CompactionError::Cancelled
                | CompactionError::Session(_),
            ) => Ok(()),
            // A failed automatic compaction does not cost the user the turn while the context
            // as it is still fits the window (the threshold keeps a reserve below it): the
            // request goes out uncompacted, the failure reported by `compaction_end`. Not
            // tried again this turn (case CMP-04: no compaction loop).
            Err(_) if tokens < window => Ok(()),
            // It does not fit either way: stop with a clear error instead of sending what will
            // not fit (case CMP-04).
            Err(e @ CompactionError::DoesNotFit { .. }) => Err(e.to_string()),
            Err(_) => Err(CompactionError::DoesNotFit {
                after: tokens,
                limit,
            }
            .to_string()),
        }
    }

    /// Requests a response, retrying transient failures with backoff: each failed attempt is
    /// emitted (and so persisted) but leaves the model's context; an abort during the wait
    /// ends the retries at once.
    async fn assistant_with_retry(&mut self) -> AssistantMessage {
        let settings = self.cfg.retry.clone();
        let mut attempt = 0u32;
        // The retry without the refused images was announced: its end is told as a retry's.
        let mut images_retried = false;
        loop {
            let a = self.assistant().await;
            self.note_answer(&a);
            let failure = self
                .last_failure
                .take()
                .filter(|_| a.stop_reason == StopReason::Error)
                .or_else(|| pi_ai::errors::classify_message(&a, self.cfg.model.context_window));
            // A refusal for the request's size that images can cause (an image named as too
            // large, a bare 413, a 400 saying "input length exceeds", "request too large",
            // "payload too large" and kin; `pi_ai::errors::is_size_refusal`): with images in
            // the request, they go first; without any, the error is what its class says.
            let image_refused = failure.as_ref().is_some_and(pi_ai::errors::is_size_refusal);
            if image_refused && !self.images_dropped && !self.control.cancel.is_cancelled() {
                // Case 18.12: the same image would be refused forever; the next request goes
                // without it (a note in its place, in the agent's context: this run's and the
                // live session's later requests), and the user is told why. The session file
                // keeps the image (issue 29 item 10).
                self.images_dropped = true;
                self.messages.pop();
                self.history_changed();
                let images = replace_large_images(&mut self.messages);
                let n = images.len();
                if n > 0 {
                    // An edit of the context: the usage so far counted the images.
                    self.usage_from = self.messages.len();
                    let why = format!(
                        "{} — retrying with {n} image(s) replaced by a note",
                        a.error_message.as_deref().unwrap_or("image refused")
                    );
                    // `images_replaced` after the refused attempt's turn_end, before
                    // `auto_retry_start` (docs/protocol.md).
                    let replaced = AgentEvent::ImagesReplaced { images };
                    self.announce_retry(&a, (1, 1, 0), why, Some(replaced))
                        .await;
                    images_retried = true;
                    self.restart().await;
                    continue;
                }
                self.messages.push(Message::Assistant(a.clone()));
            }
            let overflow = failure
                .as_ref()
                .is_some_and(|f| f.class() == pi_ai::errors::ErrorClass::ContextOverflow);
            let can_compact = self
                .cfg
                .compaction
                .as_ref()
                .is_some_and(|c| c.settings.enabled);
            if overflow && can_compact && !self.control.cancel.is_cancelled() {
                if self.overflow_recovered {
                    // One compact-and-retry per run: say so instead of looping (case CMP-04),
                    // after the run's end as Pi 1.6 says it.
                    self.after_end = Some(recovery_failed(OVERFLOW_RECOVERY_FAILED));
                    return a;
                }
                self.overflow_recovered = true;
                if self.leave_out_and_compact(&a).await.is_err() {
                    // Pi 1.6: the attempt was left out (`_omitRecoveryAttempt`, the file's
                    // `context_edit`) before the compaction, and a failed compaction does not
                    // put it back: the live context stays as the file's, and the run is over
                    // (its turn ended before the compaction).
                    self.attempt_left_out = true;
                    // A retry announced before (a transient failure's, or the one without the
                    // refused images) ends here: told after the run's end, as a last failure.
                    if attempt > 0 || images_retried {
                        self.after_end = Some(AgentEvent::AutoRetryEnd {
                            success: false,
                            attempt: attempt.max(1),
                            final_error: a.error_message.clone(),
                        });
                    }
                    return a;
                }
                continue;
            }
            match self.recover_length(&a).await {
                Some(length_recovery::Recovery::Retry) => continue,
                Some(length_recovery::Recovery::End) => return a,
                None => {}
            }
            let delay = match (&failure, settings.enabled) {
                (Some(f), true) => settings.policy.delay(attempt + 1, f),
                _ => None,
            };
            let Some(delay) = delay else {
                if attempt > 0 || images_retried {
                    let success = !matches!(a.stop_reason, StopReason::Error | StopReason::Aborted);
                    let end = AgentEvent::AutoRetryEnd {
                        success,
                        attempt: attempt.max(1),
                        final_error: (!success).then(|| a.error_message.clone()).flatten(),
                    };
                    // Pi 1.6: a success is told at the answer's `message_end`, a last failure
                    // after its run's `agent_end` (`_handlePostAgentRun`).
                    if success {
                        self.sink.emit(end).await;
                    } else {
                        self.after_end = Some(end);
                    }
                }
                return a;
            };
            attempt += 1;
            let why = a
                .error_message
                .clone()
                .unwrap_or_else(|| "Unknown error".into());
            let delay_ms = delay.as_millis() as u64;
            // The failed attempt stays in the session (it was emitted) but not in the context
            // (Pi 1.6: a `context_edit` leaves it out, so the usage before it is not trusted).
            self.messages.pop();
            self.history_changed();
            self.usage_from = self.messages.len();
            let counts = (attempt, settings.policy.max_retries, delay_ms);
            self.announce_retry(&a, counts, why, None).await;
            if pi_ai::errors::RetryPolicy::wait(delay, &self.control.cancel)
                .await
                .is_err()
            {
                // Pi 1.6's `_finishCancelledRetry`: the run already ended (`agent_end`), no
                // new one starts; the attempt stays out of the context.
                self.sink
                    .emit(AgentEvent::AutoRetryEnd {
                        success: false,
                        attempt,
                        final_error: Some("Retry cancelled".into()),
                    })
                    .await;
                self.attempt_left_out = true;
                let mut aborted = a;
                aborted.stop_reason = StopReason::Aborted;
                aborted.error_message = Some("Retry cancelled".into());
                return aborted;
            }
            self.restart().await;
        }
    }

    /// Ends the failed attempt's turn and its run and says a retry follows, as Pi 1.6's
    /// `_handlePostAgentRun` / `_prepareRetry` tell it: `turn_end`, `agent_end` with
    /// `willRetry`, `auto_retry_start`, then the attempt left out of the context
    /// ([`AgentEvent::AttemptLeftOut`]: the session's `context_edit`, told as
    /// `entry_appended`). The retry is a new run ([`Self::restart`]) after the wait.
    /// `(attempt, max_attempts, delay_ms)` are `auto_retry_start`'s; `before_start` is told
    /// right before it (the images a size refusal's retry goes without).
    async fn announce_retry(
        &mut self,
        failed: &AssistantMessage,
        (attempt, max_attempts, delay_ms): (u32, u32, u64),
        error_message: String,
        before_start: Option<AgentEvent>,
    ) {
        self.sink
            .emit(AgentEvent::TurnEnd {
                message: Arc::new(Message::Assistant(failed.clone())),
                tool_results: Vec::new(),
            })
            .await;
        self.sink
            .emit(AgentEvent::AgentEnd {
                messages: std::mem::take(&mut self.new_messages),
                will_retry: true,
            })
            .await;
        self.agent_end_sent = true;
        if let Some(event) = before_start {
            self.sink.emit(event).await;
        }
        self.sink
            .emit(AgentEvent::AutoRetryStart {
                attempt,
                max_attempts,
                delay_ms,
                error_message,
            })
            .await;
        self.sink.emit(AgentEvent::AttemptLeftOut).await;
    }

    /// Ends the turn with an error response that was never requested (the context does not
    /// fit): stored like a provider error, so the run ends and the user sees why.
    async fn failed_turn(&mut self, text: String) -> AssistantMessage {
        let model = &self.cfg.model;
        let mut m = AssistantMessage::empty(model.api.as_str(), &model.provider, &model.id);
        m.stop_reason = StopReason::Error;
        m.error_message = Some(text);
        self.push(Message::Assistant(m.clone())).await;
        m
    }

    /// Lookup, prepare, validate, before hook and abort check: `Ok` to execute, `Err` for an
    /// immediate (error) outcome.
    async fn prepare(
        &self,
        assistant: &AssistantMessage,
        index: usize,
        call: &ToolCall,
    ) -> Result<Prepared, Finalized> {
        if assistant.stop_reason == StopReason::Length {
            return Err(Finalized::refused(LENGTH_LIMIT_TEXT));
        }
        // Arguments that did not parse were replaced by `{}` for replay; running the call
        // with them would act on defaults the model never asked for (case 19.1).
        if call.raw_arguments.is_some() {
            return Err(Finalized::refused(UNFINISHED_ARGUMENTS_TEXT));
        }
        let Some(entry) = self.tool(&call.name) else {
            return Err(Finalized::refused(format!("Tool {} not found", call.name)));
        };
        let tool = entry.tool.clone();
        let raw = tool.prepare_arguments(call.arguments.clone());
        let mut args = entry
            .validator
            .get_or_init(|| crate::validate::ArgumentValidator::new(&entry.spec.parameters))
            .validate(&entry.spec.name, &raw)
            .map_err(Finalized::refused)?;
        if let Some(h) = &self.cfg.hooks {
            h.before_tool_call(BeforeToolCall {
                assistant,
                call,
                args: &mut args,
            })
            .await
            .map_err(|reason| {
                Finalized::refused(if reason.is_empty() {
                    "Tool execution was blocked".into()
                } else {
                    reason
                })
            })?;
        }
        // Approval: may ask the user (watching for abort); a rejection is the call's result.
        if let Some(gate) = &self.cfg.approval {
            gate.check_call_noted(
                &entry.spec.name,
                entry.kind,
                &call.id,
                &args,
                entry.note.as_deref(),
                &self.control.cancel,
            )
            .await
            .map_err(Finalized::refused)?;
        }
        if self.control.cancel.is_cancelled() {
            return Err(Finalized::refused(OPERATION_ABORTED_TEXT));
        }
        Ok(Prepared { index, tool, args })
    }

    /// Applies the after hook to an executed call.
    async fn finalize(
        &self,
        assistant: &AssistantMessage,
        call: &ToolCall,
        args: &Value,
        result: Result<ToolOutput, ToolError>,
        duration_ms: Option<u64>,
    ) -> Finalized {
        let (mut output, mut is_error) = match result {
            // Pi 1.6: `isError: result.isError === true` (a result the tool marked failed).
            Ok(o) => {
                let failed = o.is_error;
                (o, failed)
            }
            Err(e) => (e.into_output(), true),
        };
        if let Some(gate) = &self.cfg.approval {
            gate.settle(&call.id);
        }
        if let Some(h) = &self.cfg.hooks {
            match h
                .after_tool_call(AfterToolCall {
                    assistant,
                    call,
                    args,
                    output: &output,
                    is_error,
                })
                .await
            {
                Ok(Some(o)) => {
                    if let Some(c) = o.content {
                        output.content = c;
                        // Pi 1.6: structured content not replaced along with the content
                        // may no longer match it.
                        output.structured_content = None;
                    }
                    if o.details.is_some() {
                        output.details = o.details;
                    }
                    if let Some(t) = o.terminate {
                        output.terminate = t;
                    }
                    if let Some(e) = o.is_error {
                        is_error = e;
                    }
                }
                Ok(None) => {}
                Err(message) => {
                    output = ToolOutput::error(message, None);
                    is_error = true;
                }
            }
        }
        Finalized {
            output,
            is_error,
            duration_ms,
        }
    }

    async fn emit_end(&self, call: &ToolCall, f: &Finalized) {
        self.sink
            .emit(AgentEvent::ToolExecutionEnd {
                tool_call_id: call.id.clone(),
                tool_name: call.name.clone(),
                result: f.output.clone(),
                is_error: f.is_error,
                duration_ms: f.duration_ms,
            })
            .await;
    }

    /// Executes prepared calls concurrently (one at a time when given one), forwarding their
    /// progress, and finalizes each as it settles (emitting `tool_execution_end`).
    async fn execute(
        &self,
        assistant: &AssistantMessage,
        calls: &[ToolCall],
        prepared: Vec<Prepared>,
        slots: &mut [Option<Finalized>],
    ) {
        let (utx, mut urx) = tokio::sync::mpsc::unbounded_channel::<(usize, ToolOutput)>();
        // Tool futures run inside this task (no task per call: a tool that needs a thread uses
        // `spawn_blocking`); a panic is caught at the future's boundary and becomes an error
        // result; after the abort grace the futures are dropped, which stops them.
        let mut running = FuturesUnordered::new();
        let mut args_of: Vec<Option<Value>> = vec![None; calls.len()];
        // When each call's tool started (Pi 1.6's `durationMs` runs from there to its outcome).
        let mut started: Vec<Option<std::time::Instant>> = vec![None; calls.len()];
        // Change-making calls run in a task of their own (see `LateResults`): their outcome
        // is met here, or handed to the late side once the grace passed.
        let mut detached: Vec<Option<Arc<parking_lot::Mutex<LateSlot>>>> = vec![None; calls.len()];
        for p in prepared {
            let utx = utx.clone();
            let i = p.index;
            // Aborted before this call started (Pi 1.6: each deferred call checks the signal).
            if self.control.cancel.is_cancelled() {
                let f = Finalized::refused(OPERATION_ABORTED_TEXT);
                self.emit_end(&calls[i], &f).await;
                slots[i] = Some(f);
                continue;
            }
            let ctx = ToolContext {
                call_id: calls[i].id.clone(),
                turn: self.turn,
                cancel: self.control.cancel.child_token(),
                on_update: Arc::new(move |o| {
                    let _ = utx.send((i, o));
                }),
                model_input: Some(self.cfg.model.input.clone()),
            };
            args_of[i] = Some(p.args.clone());
            started[i] = Some(std::time::Instant::now());
            let tool = p.tool;
            let args = p.args;
            let late = self
                .cfg
                .late_results
                .clone()
                .filter(|_| tool.approval_kind() == super::ToolKind::Edit);
            let fut = std::panic::AssertUnwindSafe(async move { tool.execute(ctx, args).await })
                .catch_unwind();
            match late {
                None => running.push(async move { (i, fut.await) }.boxed()),
                Some(late) => {
                    let slot = Arc::new(parking_lot::Mutex::new(LateSlot::Pending));
                    let ready = Arc::new(tokio::sync::Notify::new());
                    detached[i] = Some(slot.clone());
                    let (task_slot, task_ready) = (slot.clone(), ready.clone());
                    let call = calls[i].clone();
                    tokio::spawn(async move {
                        let joined = fut.await;
                        let abandoned = {
                            let mut g = task_slot.lock();
                            if matches!(*g, LateSlot::Abandoned) {
                                Some(joined)
                            } else {
                                *g = LateSlot::Done(joined);
                                None
                            }
                        };
                        match abandoned {
                            Some(joined) => {
                                let (output, is_error) = match joined {
                                    Ok(Ok(o)) => {
                                        let failed = o.is_error;
                                        (o, failed)
                                    }
                                    Ok(Err(e)) => (e.into_output(), true),
                                    Err(_) => (
                                        ToolOutput::error(
                                            format!("Tool {} failed: it panicked", call.name),
                                            None,
                                        ),
                                        true,
                                    ),
                                };
                                late.settled(call, output, is_error).await;
                            }
                            None => task_ready.notify_one(),
                        }
                    });
                    running.push(
                        async move {
                            loop {
                                if let Some(joined) = slot.lock().take_done() {
                                    return (i, joined);
                                }
                                ready.notified().await;
                            }
                        }
                        .boxed(),
                    );
                }
            }
        }
        drop(utx);
        let mut settled = vec![false; calls.len()];
        let mut grace: Option<tokio::time::Instant> = None;
        loop {
            let grace_sleep = async {
                match grace {
                    Some(d) => tokio::time::sleep_until(d).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                Some((i, partial)) = urx.recv() => {
                    if !settled[i] {
                        self.emit_update(&calls[i], partial).await;
                    }
                }
                joined = running.next() => {
                    let Some((i, joined)) = joined else { break };
                    // Updates sent before the call settled still count (Pi awaits them).
                    while let Ok((j, partial)) = urx.try_recv() {
                        if !settled[j] {
                            self.emit_update(&calls[j], partial).await;
                        }
                    }
                    settled[i] = true;
                    let result = match joined {
                        Ok(r) => r,
                        Err(_) => Err(ToolError::new(format!("Tool {} failed: it panicked", calls[i].name))),
                    };
                    let args = args_of[i].take().unwrap_or(Value::Null);
                    let took = started[i].map(millis_since);
                    let f = self.finalize(assistant, &calls[i], &args, result, took).await;
                    self.emit_end(&calls[i], &f).await;
                    slots[i] = Some(f);
                }
                _ = self.control.cancel.cancelled(), if grace.is_none() => {
                    grace = Some(tokio::time::Instant::now() + ABORT_GRACE);
                }
                _ = grace_sleep => {
                    // Stop the tools that ignored the abort; each still gets its paired result.
                    // A change-making call whose outcome is in is finished as it ended; one
                    // still out is left to the late side (`LateResults`).
                    running.clear();
                    for i in 0..calls.len() {
                        if settled[i] {
                            continue;
                        }
                        let Some(args) = args_of[i].take() else { continue };
                        settled[i] = true;
                        let result = match detached[i].as_ref().map(|s| s.lock().abandon()) {
                            Some(Some(Ok(r))) => r,
                            Some(Some(Err(_))) => Err(ToolError::new(format!("Tool {} failed: it panicked", calls[i].name))),
                            Some(None) => {
                                if let Some(late) = &self.cfg.late_results {
                                    late.abandoned(&calls[i]);
                                }
                                Err(ToolError::new(super::ABORTED_IN_FLIGHT_TEXT))
                            }
                            None => Err(ToolError::new(ABORTED_TEXT)),
                        };
                        let took = started[i].map(millis_since);
                        let f = self.finalize(assistant, &calls[i], &args, result, took).await;
                        self.emit_end(&calls[i], &f).await;
                        slots[i] = Some(f);
                    }
                    break;
                }
            }
        }
    }

    async fn emit_update(&self, call: &ToolCall, partial: ToolOutput) {
        self.sink
            .emit(AgentEvent::ToolExecutionUpdate {
                tool_call_id: call.id.clone(),
                tool_name: call.name.clone(),
                args: call.arguments.clone(),
                partial_result: partial,
            })
            .await;
    }

    fn result_message(call: &ToolCall, f: Finalized) -> ToolResultMessage {
        ToolResultMessage {
            tool_call_id: call.id.clone(),
            tool_name: call.name.clone(),
            content: f.output.content,
            details: f.output.details,
            is_error: f.is_error,
            timestamp: pi_ai::types::now_millis(),
        }
    }

    /// Runs the batch of `assistant`'s calls; returns the results in call order and whether
    /// the batch asks to stop (every result has `terminate`).
    async fn batch(&mut self, assistant: &AssistantMessage) -> (Vec<ToolResultMessage>, bool) {
        let calls: Vec<ToolCall> = assistant.tool_calls().into_iter().cloned().collect();
        let sequential = self.cfg.tool_execution == ToolExecution::Sequential
            || calls
                .iter()
                .any(|c| self.tool(&c.name).is_some_and(|t| t.tool.sequential()));
        let mut results = Vec::with_capacity(calls.len());
        let mut terminate = !calls.is_empty();
        let start = |c: &ToolCall| AgentEvent::ToolExecutionStart {
            tool_call_id: c.id.clone(),
            tool_name: c.name.clone(),
            args: c.arguments.clone(),
        };
        if sequential {
            for (i, call) in calls.iter().enumerate() {
                self.sink.emit(start(call)).await;
                let mut slot = [None];
                match self.prepare(assistant, 0, call).await {
                    Ok(p) => {
                        self.execute(assistant, std::slice::from_ref(call), vec![p], &mut slot)
                            .await
                    }
                    Err(f) => {
                        self.emit_end(call, &f).await;
                        slot[0] = Some(f);
                    }
                }
                let f = slot[0]
                    .take()
                    .unwrap_or_else(|| Finalized::refused(OPERATION_ABORTED_TEXT));
                terminate &= f.output.terminate;
                let r = Self::result_message(&calls[i], f);
                self.push(Message::ToolResult(r.clone())).await;
                results.push(r);
            }
        } else {
            let mut slots: Vec<Option<Finalized>> = (0..calls.len()).map(|_| None).collect();
            let mut prepared = Vec::new();
            for (i, call) in calls.iter().enumerate() {
                self.sink.emit(start(call)).await;
                match self.prepare(assistant, i, call).await {
                    Ok(p) => prepared.push(p),
                    Err(f) => {
                        self.emit_end(call, &f).await;
                        slots[i] = Some(f);
                    }
                }
            }
            self.execute(assistant, &calls, prepared, &mut slots).await;
            for (call, slot) in calls.iter().zip(slots) {
                let f = slot.unwrap_or_else(|| Finalized::refused(OPERATION_ABORTED_TEXT));
                terminate &= f.output.terminate;
                let r = Self::result_message(call, f);
                self.push(Message::ToolResult(r.clone())).await;
                results.push(r);
            }
        }
        (results, terminate)
    }

    fn drain(&self, q: &Queue) -> Vec<Message> {
        if self.control.cancel.is_cancelled() {
            Vec::new()
        } else {
            q.drain()
        }
    }
}

/// A manual compaction while no run is active (Pi's `compact(customInstructions)`): emits
/// `compaction_start` / `compaction_end`, commits when the summary shrinks the context, and
/// returns the context after it (unchanged on failure). Steering and follow-ups sent meanwhile
/// stay queued in `control` and come back in [`RunOutcome::undelivered`] (case PAIR-03).
pub async fn run_compaction(
    cfg: &AgentConfig,
    history: Vec<Message>,
    instructions: Option<&str>,
    control: &RunControl,
    sink: &dyn EventSink,
) -> (RunOutcome, Result<CompactionResult, CompactionError>) {
    let reason = CompactionReason::Manual;
    sink.emit(AgentEvent::CompactionStart { reason }).await;
    let specs: Vec<ToolSpec> = cfg.tools.iter().map(|t| t.spec()).collect();
    let result = match &cfg.compaction {
        None => Err(CompactionError::NothingToCompact),
        Some(cc) => {
            compact_checked(
                cc,
                &cfg.model,
                &cfg.system_prompt,
                &specs,
                instructions,
                &history,
                reason,
                &cfg.retry,
                sink,
                &control.cancel,
            )
            .await
        }
    };
    let (messages, result) = match result {
        Ok((p, messages)) => (messages, Ok(p.result)),
        Err(e) => (history, Err(e)),
    };
    let aborted = matches!(result, Err(CompactionError::Cancelled));
    sink.emit(AgentEvent::CompactionEnd {
        reason,
        result: result.as_ref().ok().cloned(),
        aborted,
        will_retry: false,
        error_message: match &result {
            Err(e) if !aborted => Some(compaction_error_text(reason, e)),
            _ => None,
        },
        context: result.is_ok().then(|| messages.clone()),
    })
    .await;
    let outcome = RunOutcome {
        usage_from: result.is_ok().then_some(messages.len()),
        messages,
        stop_reason: match &result {
            Ok(_) => StopReason::Stop,
            Err(CompactionError::Cancelled) => StopReason::Aborted,
            Err(_) => StopReason::Error,
        },
        error_message: result.as_ref().err().map(|e| e.to_string()),
        undelivered: control.take_undelivered(),
        next_turn: control.take_next_turn(),
    };
    (outcome, result)
}

/// Runs the loop on `history` plus `prompts` until no continuation is allowed and no queued
/// message is left, or a provider error or abort ends it. Emits one `agent_start` and one
/// `agent_end` per run, the event order of Pi 0.73.1's `runLoop`; an overflow's or a
/// recoverable `length` stop's compact-and-retry ends the run and retries in a new one (a
/// second `agent_start` / `agent_end` pair from the same call), as Pi 1.6 recovers after its
/// agent loop ended (`Run::leave_out_and_compact`).
pub async fn run_agent(
    cfg: &AgentConfig,
    history: Vec<Message>,
    prompts: Vec<Message>,
    control: &RunControl,
    sink: &dyn EventSink,
) -> RunOutcome {
    run_agent_from(cfg, history, 0, prompts, control, sink).await
}

/// [`run_agent`] on a `history` whose messages before `usage_from` carry usage of a context
/// that has changed since ([`crate::session::SessionContext::usage_from`]): the compaction
/// threshold does not anchor on it (Pi 1.6's `estimateProjectedContextTokens`).
pub async fn run_agent_from(
    cfg: &AgentConfig,
    history: Vec<Message>,
    usage_from: usize,
    prompts: Vec<Message>,
    control: &RunControl,
    sink: &dyn EventSink,
) -> RunOutcome {
    let tools: Vec<ToolEntry> = cfg.tools.iter().map(ToolEntry::new).collect();
    let specs: Vec<ToolSpec> = tools.iter().map(|t| t.spec.clone()).collect();
    let specs_chars = crate::compaction::tools_chars(&specs);
    let history_len = history.len();
    let mut run = Run {
        cfg: cfg.clone(),
        static_tools: tools.len(),
        tools,
        specs,
        specs_chars,
        specs_generation: pi_ai::next_tools_generation(),
        last_failure: None,
        control,
        sink,
        messages: history,
        new_messages: Vec::new(),
        turn: 0,
        usage_from: usage_from.min(history_len),
        compacted_this_turn: false,
        overflow_recovered: false,
        attempt_left_out: false,
        agent_end_sent: false,
        after_end: None,
        images_dropped: false,
        request_cache: Default::default(),
        seen: Seen::default(),
    };
    // Pi 1.6's `_prepareRun`: before a prompt joins the context (and before the run's
    // `agent_start`), the last answer's context is checked against the threshold (an aborted
    // answer too) and compacted; a failure is told by its `compaction_end` and the prompt
    // runs on the context as it is. A continuation (no prompt) is not checked.
    let compacted_before = if !prompts.is_empty()
        && last_answer_past_threshold(&run.cfg, &run.messages, run.usage_from, true, || {
            run.specs_chars
        }) {
        // Nothing to compact is no try (no event tells of one).
        !matches!(
            run.compact(CompactionReason::Threshold).await,
            Err(CompactionError::NothingToCompact)
        )
    } else {
        false
    };
    sink.emit(AgentEvent::AgentStart).await;
    sink.emit(AgentEvent::TurnStart).await;
    for m in prompts {
        run.push(m).await;
    }
    // The prompt's user turn had its one automatic compaction (case CMP-04), before it.
    run.compacted_this_turn |= compacted_before;
    let mut pending = run.drain(&control.steering);
    let mut first_turn = true;
    // An overflow's or a cut answer's recovery ended the run (Pi 1.6 then makes no threshold
    // check after it).
    let mut recovery_ended = false;
    let last = 'outer: loop {
        let mut has_more_tool_calls = true;
        let mut last = None;
        while has_more_tool_calls || !pending.is_empty() {
            // The threshold check between turns, before the next `turn_start` and before
            // queued messages join the context (Pi 1.6's `prepareNextTurn`); the first
            // request of a run was checked before its prompt.
            let due = if first_turn {
                Ok(())
            } else {
                let due = run.compact_if_due().await;
                // Pi 1.6's loop picks up steering queued while the preparation (a compaction)
                // ran, when the turn had none (one-at-a-time mode gives one per turn).
                if pending.is_empty() {
                    pending = run.drain(&control.steering);
                }
                sink.emit(AgentEvent::TurnStart).await;
                due
            };
            first_turn = false;
            for m in std::mem::take(&mut pending) {
                run.push(m).await;
            }
            let ready = match due {
                Ok(()) => run.ensure_output_room().await,
                Err(text) => Err(text),
            };
            let assistant = match ready {
                Ok(()) => run.assistant_with_retry().await,
                Err(text) => run.failed_turn(text).await,
            };
            if std::mem::take(&mut run.attempt_left_out) {
                recovery_ended = true;
                // Pi 1.6: the answer is out of the context and no retry follows; its turn
                // ended before the compaction (one `turn_end`), and an overflow error's tool
                // calls get no results (Pi's loop gives a failed response none; the response
                // left the context). A cut answer's run ends as one that completed, an
                // overflow's with its error, unless an abort stopped the compaction.
                let end = match assistant.stop_reason {
                    _ if control.cancel.is_cancelled() => (StopReason::Aborted, None),
                    StopReason::Length => (StopReason::Stop, None),
                    stop => (stop, assistant.error_message.clone()),
                };
                break 'outer Some(end);
            }
            if matches!(
                assistant.stop_reason,
                StopReason::Error | StopReason::Aborted
            ) {
                // The calls of a failed response never run, but each still gets its paired
                // result so the stored history stays valid (case PAIR-01).
                let text = if assistant.stop_reason == StopReason::Aborted {
                    ABORTED_TEXT
                } else {
                    FAILED_RESPONSE_TEXT
                };
                let mut results = Vec::new();
                for call in assistant.tool_calls() {
                    let r = Run::result_message(call, Finalized::refused(text));
                    run.push(Message::ToolResult(r.clone())).await;
                    results.push(r);
                }
                let end = (assistant.stop_reason, assistant.error_message.clone());
                sink.emit(AgentEvent::TurnEnd {
                    message: Arc::new(Message::Assistant(assistant)),
                    tool_results: results,
                })
                .await;
                break 'outer Some(end);
            }
            has_more_tool_calls = false;
            let mut results = Vec::new();
            if !assistant.tool_calls().is_empty() {
                let (r, terminate) = run.batch(&assistant).await;
                results = r;
                has_more_tool_calls = !terminate;
            }
            // The turn's message moves into its event; the run keeps only how it ended.
            last = Some((assistant.stop_reason, assistant.error_message.clone()));
            sink.emit(AgentEvent::TurnEnd {
                message: Arc::new(Message::Assistant(assistant)),
                tool_results: results,
            })
            .await;
            pending = run.drain(&control.steering);
        }
        let follow = run.drain(&control.follow_up);
        if follow.is_empty() {
            break last;
        }
        pending = follow;
    };
    // The run's messages move into their event (the outcome keeps the whole history).
    if !run.agent_end_sent {
        sink.emit(AgentEvent::AgentEnd {
            messages: std::mem::take(&mut run.new_messages),
            will_retry: false,
        })
        .await;
    }
    if let Some(e) = run.after_end.take() {
        // A recovery's failure (its `compaction_end`) ended the run.
        recovery_ended |= matches!(e, AgentEvent::CompactionEnd { .. });
        sink.emit(e).await;
    }
    // Pi 1.6's `_handlePostAgentRun`: after the run's `agent_end`, its last answer's context
    // is checked against the threshold (not an aborted one) and compacted, before the agent
    // settles. Messages queued meanwhile come back undelivered and start the next run. At
    // most one automatic compaction per user turn (case CMP-04): none after one tried in the
    // last user turn.
    if !recovery_ended
        && !run.compacted_this_turn
        && !control.cancel.is_cancelled()
        && last_answer_past_threshold(&run.cfg, &run.messages, run.usage_from, false, || {
            run.specs_chars
        })
    {
        let _ = run.compact(CompactionReason::Threshold).await;
    }
    RunOutcome {
        usage_from: Some(run.usage_from),
        messages: run.messages,
        stop_reason: last.as_ref().map(|l| l.0).unwrap_or(StopReason::Stop),
        error_message: last.and_then(|l| l.1),
        undelivered: control.take_undelivered(),
        next_turn: control.take_next_turn(),
    }
}

/// The empty message of an answer's `message_start`: `stopReason: "pending"`, as Pi 1.6's
/// pi-ai starts every streamed message.
fn pending(model: &pi_ai::Model) -> AssistantMessage {
    let mut m = AssistantMessage::empty(model.api.as_str(), &model.provider, &model.id);
    m.stop_reason = StopReason::Pending;
    m
}

/// Characters as JavaScript's `length` counts them (UTF-16 code units).
fn js_len(s: &str) -> u64 {
    s.encode_utf16().count() as u64
}

/// `ceil(chars / 3.5)`: pi-ai 1.6's `estimateTextTokens` (`utils/estimate.js`,
/// `CHARS_PER_TOKEN = 3.5`), in integers.
fn pi_tokens(chars: u64) -> u64 {
    (chars * 2).div_ceil(7)
}

/// The built-in tools Pi 1.6 declares with `constrainedSampling: {type: "json_schema", strict:
/// "prefer"}` (`core/tools/{read,bash,edit,write}.js`): their stored declaration, which Pi's
/// estimate counts, carries those characters too.
const CONSTRAINED_SAMPLING: &str =
    r#","constrainedSampling":{"type":"json_schema","strict":"prefer"}"#;

/// pi-ai 1.6's `estimateMessageTokens`.
fn pi_message_tokens(m: &Message) -> u64 {
    use pi_ai::{ContentBlock, UserContent};
    let blocks = |b: &[ContentBlock]| -> u64 {
        b.iter()
            .map(|b| match b {
                ContentBlock::Text(t) => js_len(&t.text),
                // `ESTIMATED_IMAGE_CHARS`
                ContentBlock::Image(_) => 4800,
                ContentBlock::Thinking(t) => js_len(&t.thinking),
                ContentBlock::ToolCall(c) => js_len(&c.name) + js_len(&c.arguments.to_string()),
            })
            .sum()
    };
    let chars = match m {
        Message::User(u) => match &u.content {
            UserContent::Text(t) => js_len(t),
            UserContent::Blocks(b) => blocks(b),
        },
        Message::Assistant(a) => blocks(&a.content),
        Message::ToolResult(r) => blocks(&r.content),
        Message::System(s) => js_len(&s.update_text()),
    };
    pi_tokens(chars)
}

/// pi-ai 1.6's `estimateContextTokens` of the context Pi's agent hands a request: its leading
/// system message (the prompt `system_prompt` and the declarations of `tools`, as stored) and
/// `messages`. Anchored on the latest assistant message that is neither failed nor aborted,
/// has usage, and is not older than a message before it (a summary put in front of it): its
/// usage total plus the estimates of the messages after it; without one, every estimate.
/// The run counts it incrementally ([`Run::pi_context_tokens`]); this count from the start is
/// what the tests hold that one to.
#[cfg(test)]
fn pi_context_tokens(system_prompt: &str, tools: &[ToolSpec], messages: &[Message]) -> u64 {
    let mut pi = PiContext::default();
    pi.advance(messages);
    match pi.anchor {
        Some((_, total)) => total + pi.tail,
        None => pi_tokens(js_len(system_prompt)) + pi_tools_tokens(tools) + pi.tail,
    }
}

/// Pi 1.6's estimate of a context's messages ([`Run::pi_context_tokens`]) as far as it has read
/// them: a further call of [`PiContext::advance`] with the same messages and more appended
/// reads only the new ones and ends where a count of all of them from the start would.
#[derive(Debug, Clone, Copy)]
struct PiContext {
    /// How many leading messages were read.
    scanned: usize,
    /// The latest timestamp among them (`i64::MIN`: none; a system message has none).
    latest: i64,
    /// `(index, usage total)` of the anchor: the latest assistant message read that is
    /// neither failed nor aborted, has usage, and is not older than a message before it.
    anchor: Option<(usize, u64)>,
    /// `estimateMessageTokens` summed over the messages read after the anchor (all of them
    /// without one).
    tail: u64,
}

impl Default for PiContext {
    fn default() -> Self {
        PiContext {
            scanned: 0,
            latest: i64::MIN,
            anchor: None,
            tail: 0,
        }
    }
}

impl PiContext {
    /// Reads `messages[self.scanned..]`: `messages` must start with the messages read before,
    /// unchanged.
    fn advance(&mut self, messages: &[Message]) {
        for (i, m) in messages.iter().enumerate().skip(self.scanned) {
            let mut anchored = false;
            if let Message::Assistant(a) = m {
                let total = a.usage.context_total();
                if a.timestamp >= self.latest
                    && !matches!(a.stop_reason, StopReason::Error | StopReason::Aborted)
                    && total > 0
                {
                    self.anchor = Some((i, total));
                    self.tail = 0;
                    anchored = true;
                }
            }
            if !anchored {
                self.tail += pi_message_tokens(m);
            }
            let stamp = match m {
                Message::User(u) => Some(u.timestamp),
                Message::Assistant(a) => Some(a.timestamp),
                Message::ToolResult(r) => Some(r.timestamp),
                Message::System(_) => None,
            };
            if let Some(t) = stamp {
                self.latest = self.latest.max(t);
            }
        }
        self.scanned = self.scanned.max(messages.len());
    }
}

/// Pi 1.6's estimate of the tool declarations its stored system message holds
/// (`JSON.stringify` of the array of `{name, description, parameters}`, with
/// [`CONSTRAINED_SAMPLING`] on the built-in four), in tokens.
fn pi_tools_tokens(tools: &[ToolSpec]) -> u64 {
    if tools.is_empty() {
        return 0;
    }
    let declared: u64 = tools
        .iter()
        .map(|t| {
            let decl = serde_json::json!({"name": t.name, "description": t.description, "parameters": t.parameters});
            let extra = if ["read", "bash", "edit", "write"].contains(&t.name.as_str()) {
                CONSTRAINED_SAMPLING.len() as u64
            } else {
                0
            };
            js_len(&decl.to_string()) + extra
        })
        .sum::<u64>();
    // `JSON.stringify` of the array: brackets and the commas between declarations.
    pi_tokens(declared + 2 + tools.len() as u64 - 1)
}

#[cfg(test)]
mod budget_tests {
    use super::*;

    /// Figures from Pi 1.6.0 itself (`bench/pi_wire_check.py --context-window 20000`: its
    /// first request asked 14,391 with an input estimate of 1,513) and the branches of
    /// `clampMaxTokensToContext`.
    #[test]
    fn output_limit_is_pi_1_6_s_clamp() {
        assert_eq!(pi_output_limit(20_000, 1_513), 14_391);
        // The 15 % margin while it leaves at least 32,768.
        assert_eq!(pi_output_limit(200_000, 100_000), 85_000);
        // Less than that: the fixed margin only, at most 32,768.
        assert_eq!(pi_output_limit(200_000, 150_000), 32_768);
        assert_eq!(pi_output_limit(40_000, 5_000), 30_904);
        // Nothing left: 1.
        assert_eq!(pi_output_limit(20_000, 19_000), 1);
        // `ceil(chars / 3.5)`.
        assert_eq!((pi_tokens(7), pi_tokens(8), pi_tokens(0)), (2, 3, 0));
    }

    /// Pi 1.6's estimate counted as a run counts it, a message at a time with the state kept
    /// between requests, gives at every length of the context the figure of a count from the
    /// start: the anchor moves to a later assistant message with usage, and not to a failed
    /// one, one older than a message before it (a summary put in front of it) or one without
    /// usage; without an anchor the system prompt and the tool declarations count.
    #[test]
    fn the_estimate_counted_as_messages_arrive_is_the_whole_count() {
        use pi_ai::{AssistantMessage, ContentBlock, ToolCall, ToolResultMessage, UserContent};
        let user = |text: &str, timestamp| {
            Message::User(pi_ai::UserMessage {
                content: UserContent::Blocks(vec![ContentBlock::text(text)]),
                timestamp,
            })
        };
        let assistant = |content: Vec<ContentBlock>, total, input, stop_reason, timestamp| {
            let mut a = AssistantMessage::empty("openai-completions", "mock", "mock-1");
            a.content = content;
            a.usage.total_tokens = total;
            a.usage.input = input;
            a.stop_reason = stop_reason;
            a.timestamp = timestamp;
            Message::Assistant(a)
        };
        let messages = [
            // "hello": ceil(5 / 3.5) = 2.
            user("hello", 100),
            // The anchor: 1,000; its own content is not counted.
            assistant(
                vec![
                    ContentBlock::text("abcdefg"),
                    ContentBlock::ToolCall(ToolCall::new(
                        "c1",
                        "read",
                        serde_json::json!({"path": "a"}),
                    )),
                ],
                1_000,
                0,
                StopReason::ToolUse,
                200,
            ),
            // "xyz": 1.
            Message::ToolResult(ToolResultMessage {
                tool_call_id: "c1".into(),
                tool_name: "read".into(),
                content: vec![ContentBlock::text("xyz")],
                details: None,
                is_error: false,
                timestamp: 300,
            }),
            // Failed: not an anchor; "err": 1.
            assistant(
                vec![ContentBlock::text("err")],
                500,
                0,
                StopReason::Error,
                400,
            ),
            // Older than a message before it: not an anchor; no content: 0.
            assistant(Vec::new(), 2_000, 0, StopReason::Stop, 50),
            // No usage at all: not an anchor; "ab": 1.
            assistant(vec![ContentBlock::text("ab")], 0, 0, StopReason::Stop, 450),
            // No total but its parts: the anchor, 3,000.
            assistant(
                vec![ContentBlock::text("later")],
                0,
                3_000,
                StopReason::Stop,
                500,
            ),
            // "1234567": 2.
            user("1234567", 600),
        ];
        let tools = [ToolSpec {
            constrained_sampling: None,
            name: "read".into(),
            description: "Read".into(),
            parameters: serde_json::json!({"type": "object"}),
        }];
        // Without an anchor: "sys" 1, the declaration `{"description":"Read","name":"read",
        // "parameters":{"type":"object"}}` (66 characters), read's constrainedSampling (63)
        // and the array's brackets: ceil(131 / 3.5) = 38.
        assert_eq!(pi_tools_tokens(&tools), 38);
        let expected = [39, 41, 1_000, 1_001, 1_002, 1_002, 1_003, 3_000, 3_002];
        let mut kept = PiContext::default();
        for (n, want) in expected.into_iter().enumerate() {
            kept.advance(&messages[..n]);
            let incremental = match kept.anchor {
                Some((_, total)) => total + kept.tail,
                None => pi_tokens(js_len("sys")) + pi_tools_tokens(&tools) + kept.tail,
            };
            assert_eq!(
                (
                    incremental,
                    pi_context_tokens("sys", &tools, &messages[..n])
                ),
                (want, want),
                "after {n} messages"
            );
        }
        assert_eq!(kept.anchor, Some((6, 3_000)));
    }
}

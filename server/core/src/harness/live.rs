//! What a user does with a live session (Pi's `AgentSession` methods): prompt, steer,
//! follow-up, custom messages, the queue, abort, compact, branch (with a summary), fork and
//! clone, label, the user's own shell command, close. Each checks what it refers to before
//! changing anything and answers with an [`Error`] naming what is wrong; products map the
//! errors to their own (the editor server: JSON-RPC codes).
//!
//! Every queued message gets a queue id and is reported by [`Notice::Queue`]: `queued`, then
//! `delivered` when the loop puts it into the conversation, then `consumed` when a model
//! response has seen it; or `dropped` / `removed`. While no run is active, steering and
//! follow-ups wait for the next prompt (as in Pi).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use pi_ai::types::ImageContent;
use pi_ai::{ContentBlock, Message, UserContent, UserMessage};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::queue::{
    AppliedEdit, DeliverAs, QueueState, QueuedMessage, StoppedProcess, StoppedToolCall,
};
use super::{sessions_dir, AgentSession};
use crate::agent::{Tool, ToolContext};
use crate::compaction::CompactionResult;
use crate::extension::CustomMessage;
use crate::session::{BashExecution, EntryData, SessionError, StoredMessage};
use crate::QueueMode;

/// How long an abort (and a close) waits for the run to end before answering.
pub const ABORT_WAIT: Duration = Duration::from_secs(5);

/// Why a session operation did nothing.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A value given is wrong (`field` names it).
    #[error("{field}: {message}")]
    Invalid { field: String, message: String },
    /// A run (or a rewind, or a compaction) is in the way.
    #[error("{0}")]
    Busy(String),
    /// No such entry in the session.
    #[error("{0}")]
    UnknownEntry(String),
    /// The model asked for cannot be used.
    #[error("{0}")]
    Model(String),
    /// The session file could not be written.
    #[error(transparent)]
    Session(#[from] SessionError),
    /// The branch summary could not be written (nothing changed).
    #[error("{0}")]
    Summary(String),
    /// The compaction could not be done (nothing was written).
    #[error("{0}")]
    Compaction(String),
    /// The user's shell command is still running.
    #[error("{0}")]
    BashRunning(String),
}

fn invalid(field: &str, message: impl std::fmt::Display) -> Error {
    Error::Invalid {
        field: field.to_string(),
        message: message.to_string(),
    }
}

/// Checks one image: an `image/*` MIME type and base64 data (no `data:` prefix). Errors name
/// `<field>.mimeType` / `<field>.data`.
pub fn check_image(mime_type: &str, data: &str, field: &str) -> Result<(), Error> {
    if !mime_type.starts_with("image/") {
        return Err(invalid(
            &format!("{field}.mimeType"),
            format!("expected an image/* type, got {mime_type:?}"),
        ));
    }
    let base64 = data
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'=' | b'\n' | b'\r'));
    if data.is_empty() || !base64 {
        return Err(invalid(
            &format!("{field}.data"),
            "expected base64 data without a data: prefix",
        ));
    }
    Ok(())
}

/// A user message of `text` and `images` (checked by the caller, [`check_image`]).
fn user_message(text: &str, images: Vec<ImageContent>) -> Message {
    if images.is_empty() {
        return Message::user_text(text);
    }
    let mut blocks = vec![ContentBlock::text(text)];
    blocks.extend(images.into_iter().map(ContentBlock::Image));
    Message::User(UserMessage {
        content: UserContent::Blocks(blocks),
        timestamp: pi_ai::types::now_millis(),
    })
}

/// What a prompt did.
#[derive(Debug, Clone, PartialEq)]
pub enum PromptOutcome {
    /// `/name args` ran the extension command `name` (no run).
    Command(String),
    /// A run started.
    Started { run_id: String },
    /// Queued into the active run.
    Queued {
        queue_id: String,
        run_id: Option<String>,
    },
}

/// What [`AgentSession::send_custom_message`] did: queued (`queue_id`), appended at once
/// (`entry_id`), and the run it started or joined (`run_id`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CustomSent {
    pub queue_id: Option<String>,
    pub entry_id: Option<String>,
    pub run_id: Option<String>,
}

/// What an abort stopped ([`AgentSession::abort`]); aborting twice, or with no active run,
/// is not an error.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct AbortReport {
    /// True when a run was active and has been told to stop.
    pub aborted: bool,
    /// The run that was stopped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
    /// Tool calls that were executing when the abort arrived (each got an error result).
    #[serde(default)]
    pub stopped_tool_calls: Vec<StoppedToolCall>,
    /// Shell commands (`bash` tool calls) whose process group was killed.
    #[serde(default)]
    pub stopped_processes: Vec<StoppedProcess>,
    /// Edits the run had already applied (they stay applied; undo them in the editor).
    #[serde(default)]
    pub applied_edits: Vec<AppliedEdit>,
    /// Edits sent to the editor that it had not answered when the run stopped: each may
    /// still be applied, and is recorded in the session when the editor answers (a late
    /// result, [`crate::harness::Notice::LateResult`]). Left out when empty.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pending_edits: Vec<AppliedEdit>,
    /// Steering / follow-up / next-turn messages still queued: they go with the next prompt
    /// unless the queue is cleared.
    #[serde(default)]
    pub queued_messages: Vec<QueuedMessage>,
}

/// The user's shell command's result (Pi's `BashResult`), once it has ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct BashOutcome {
    /// The output's tail (Pi's limits), stdout and stderr merged.
    pub output: String,
    /// Absent when killed by a signal or cancelled.
    pub exit_code: Option<i32>,
    pub cancelled: bool,
    pub truncated: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub full_output_path: Option<String>,
    /// The `bashExecution` entry, when written at once (the session was idle).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entry_id: Option<String>,
    /// When a run was active: the entry waits for it to end (in the context: queued for the
    /// next prompt under this id).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue_id: Option<String>,
}

/// Pi 1.6's `navigateTree` options besides `summarize` ([`AgentSession::branch_with`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NavigateOptions {
    /// `customInstructions`: "Additional focus" of the summary request.
    pub custom_instructions: Option<String>,
    /// `replaceInstructions`: the custom instructions replace Pi's summary prompt.
    pub replace_instructions: bool,
    /// `label`: put on the summary entry, or on the target without a summary.
    pub label: Option<String>,
}

/// Where [`AgentSession::branch`] moved the leaf.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct BranchOutcome {
    pub leaf_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary_entry_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<String>,
    /// Text of the user message navigated to, for the editor's input.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub editor_text: Option<String>,
    pub message_count: usize,
}

/// The text of a stored message or entry (`content` string or text blocks; summaries;
/// shell commands).
pub fn entry_text(raw: &Value) -> Option<String> {
    let m = if raw["type"] == "message" {
        &raw["message"]
    } else {
        raw
    };
    if let Some(c) = m["command"].as_str() {
        return Some(format!("!{c}"));
    }
    if let Some(s) = m["summary"].as_str() {
        return Some(s.to_string());
    }
    match &m["content"] {
        Value::String(s) => Some(s.clone()),
        Value::Array(blocks) => {
            let text: Vec<&str> = blocks
                .iter()
                .filter_map(|b| match b["type"].as_str() {
                    Some("text") => b["text"].as_str(),
                    Some("thinking") => None,
                    Some("toolCall") => b["name"].as_str(),
                    _ => None,
                })
                .collect();
            (!text.is_empty()).then(|| text.join("\n"))
        }
        _ => None,
    }
}

/// Marks the session's user shell command ended when dropped.
struct EndBash(Arc<super::Tracker>);

impl Drop for EndBash {
    fn drop(&mut self) {
        self.0.end_bash();
    }
}

/// Splits the text of a bash result that failed into output and the trailing status line the
/// tool adds.
fn split_status(text: &str) -> (String, Option<String>) {
    const ENDINGS: [&str; 5] = [
        "Command exited with code ",
        "Command aborted",
        "Command was killed by signal ",
        "Command timed out after ",
        "Command failed",
    ];
    let is_status = |s: &str| ENDINGS.iter().any(|e| s.starts_with(e));
    match text.rsplit_once("\n\n") {
        Some((body, last)) if is_status(last) => (body.to_string(), Some(last.to_string())),
        // A silent command's status stands alone (Pi 1.6's `appendStatus` of no text).
        None if is_status(text) => (String::new(), Some(text.to_string())),
        _ => (text.to_string(), None),
    }
}

impl AgentSession {
    /// The user's prompt `text` with `images` (Pi's `prompt`): `/name args` of an extension
    /// command runs it at once (also during a run; Pi checks commands before templates and
    /// skills); otherwise the text is expanded (templates, skills) and starts a run, or, while
    /// a run is active, is queued as `behavior` says (`None` then: [`Error::Busy`]). `model`
    /// (`provider/id`) switches the model first; a queued prompt joins the running run, which
    /// keeps its model, so another model is refused then.
    pub async fn prompt(
        &self,
        text: &str,
        images: Vec<ImageContent>,
        behavior: Option<DeliverAs>,
        model: Option<&str>,
    ) -> Result<PromptOutcome, Error> {
        if text.starts_with('/') {
            // A command may change what the configuration reads (plan mode's `/plan`).
            self.forget_kept_config();
            if let Some(name) = self.extensions.run_command(text).await {
                return Ok(PromptOutcome::Command(name));
            }
        }
        let (text, images) = self
            .normalize_prompt_images(self.expand(text), images)
            .await;
        let message = user_message(&text, images);
        let model = model.filter(|m| *m != self.model().full_id());
        if self.agent.is_streaming() {
            if let Some(how) = behavior {
                if let Some(m) = model {
                    return Err(invalid(
                        "model",
                        format!("cannot switch to {m:?} while a run is active: a queued prompt joins the running run, which keeps its model; switch with agent/model/set (from the next run) or after agent/abort"),
                    ));
                }
                let (q, run_id) = self.queue(how, message, None).await;
                return Ok(PromptOutcome::Queued {
                    queue_id: q.queue_id,
                    run_id,
                });
            }
        } else if let Some(m) = model {
            self.set_model_by_id(m)?;
        }
        // Extensions' before_agent_start messages go with the prompt, after it (Pi's order),
        // each stored as the custom_message it is.
        let mut messages = vec![message];
        for m in self.extensions.before_agent_start() {
            match custom_parts(&m) {
                Ok((entry, message)) => {
                    self.tracker
                        .queue(DeliverAs::Steer, message.clone(), Some(entry));
                    messages.push(message);
                }
                Err(e) => tracing::warn!("an extension's before_agent_start message: {e}"),
            }
        }
        // Tools, caps and project instructions are read afresh for every prompt.
        let run_id = self.start(messages)?;
        Ok(PromptOutcome::Started { run_id })
    }

    /// Pi 1.6's `_normalizePromptImages` for a prompt, steer or follow-up: each image
    /// converted to a type providers take and, with `images.autoResize` (default on), fitted to
    /// 2000×2000 / 4.5 MB ([`crate::tools::process_prompt_image`]); the hints (a conversion,
    /// the original size, or why an image was left out) appended to `text` after a blank line,
    /// one per line, as Pi appends them.
    async fn normalize_prompt_images(
        &self,
        text: String,
        images: Vec<ImageContent>,
    ) -> (String, Vec<ImageContent>) {
        if images.is_empty() {
            return (text, images);
        }
        let auto_resize = self.ws.settings().image_auto_resize();
        // The images' data is shared (`Arc<str>`): the copy handed over costs no bytes, and a
        // failed worker leaves the images as they came.
        let sent = images.clone();
        let processed = match tokio::task::spawn_blocking(move || {
            sent.iter()
                .map(|i| crate::tools::process_prompt_image(&i.data, &i.mime_type, auto_resize))
                .collect::<Vec<_>>()
        })
        .await
        {
            Ok(p) => p,
            Err(e) => {
                tracing::warn!("prompt images left as they came: {e}");
                return (text, images);
            }
        };
        let mut kept = Vec::new();
        let mut hints = Vec::new();
        for p in processed {
            match p {
                Ok((image, h)) => {
                    kept.push(image);
                    hints.extend(h);
                }
                Err(omitted) => hints.push(omitted),
            }
        }
        if hints.is_empty() {
            return (text, kept);
        }
        (format!("{text}\n\n{}", hints.join("\n")), kept)
    }

    /// Queues `message` after telling the listeners (so `queued` always comes before
    /// `delivered`); `entry`: what to store instead of a plain user message. Returns the
    /// queued message and the active run's id.
    pub async fn queue(
        &self,
        how: DeliverAs,
        message: Message,
        entry: Option<EntryData>,
    ) -> (QueuedMessage, Option<String>) {
        let report = self.tracker.queue(how, message.clone(), entry);
        self.tell(
            self.tracker
                .queue_notice(report.clone(), QueueState::Queued),
        )
        .await;
        self.ensure_context();
        self.agent.enqueue(message, how);
        let run = self
            .agent
            .is_streaming()
            .then(|| self.agent.run_id())
            .flatten();
        (report, run)
    }

    /// Pi's `steer` / `followUp`: `text` (expanded: templates, skills) with `images`, queued
    /// as `how`; returns the queue id and the active run. An extension command cannot be
    /// queued (it runs through [`AgentSession::prompt`]).
    pub async fn queue_text(
        &self,
        text: &str,
        images: Vec<ImageContent>,
        how: DeliverAs,
    ) -> Result<(String, Option<String>), Error> {
        if let Some(rest) = text.strip_prefix('/') {
            let name = rest.split(' ').next().unwrap_or_default();
            if self.extensions.commands().iter().any(|c| c.name == name) {
                return Err(invalid(
                    "text",
                    format!("extension command \"/{name}\" cannot be queued; send it with agent/prompt (it runs at once, also during a run)"),
                ));
            }
        }
        let (text, images) = self
            .normalize_prompt_images(self.expand(text), images)
            .await;
        let message = user_message(&text, images);
        let (q, run) = self.queue(how, message, None).await;
        Ok((q.queue_id, run))
    }

    /// Pi's `sendCustomMessage` (also an extension's `send_message`): `nextTurn` waits for
    /// the next prompt; during a run it is queued as steering (default) or follow-up; when
    /// idle it starts a run with `trigger_turn`, else it is appended to the session at once.
    /// Stored as a `custom_message` entry when it reaches the conversation.
    pub async fn send_custom_message(&self, m: CustomMessage) -> Result<CustomSent, Error> {
        if m.custom_type.trim().is_empty() {
            return Err(invalid("customType", "must not be empty"));
        }
        if let Some(blocks) = m.content.as_array() {
            if blocks.is_empty() {
                return Err(invalid("content", "must not be empty"));
            }
            if let Some(i) = blocks
                .iter()
                .position(|b| b["type"] != "text" && b["type"] != "image")
            {
                return Err(invalid(
                    &format!("content[{i}].type"),
                    "expected \"text\" or \"image\"",
                ));
            }
            // Images are checked as prompts' are: a bad one would only fail the provider
            // request of every later turn.
            for (i, b) in blocks.iter().enumerate() {
                if b["type"] == "image" {
                    check_image(
                        b["mimeType"].as_str().unwrap_or_default(),
                        b["data"].as_str().unwrap_or_default(),
                        &format!("content[{i}]"),
                    )?;
                }
            }
        }
        let (entry, message) = custom_parts(&m)?;
        let streaming = self.agent.is_streaming();
        let how = match (m.deliver_as, streaming) {
            (Some(DeliverAs::NextTurn), _) => Some(DeliverAs::NextTurn),
            (Some(DeliverAs::FollowUp), true) => Some(DeliverAs::FollowUp),
            (_, true) => Some(DeliverAs::Steer),
            (_, false) => None,
        };
        if let Some(how) = how {
            let (q, run_id) = self.queue(how, message, Some(entry)).await;
            return Ok(CustomSent {
                queue_id: Some(q.queue_id),
                run_id,
                ..CustomSent::default()
            });
        }
        if m.trigger_turn {
            // Delivered by the run: tracked so it is stored as a custom_message entry.
            self.tracker
                .queue(DeliverAs::Steer, message.clone(), Some(entry));
            let run_id = self
                .start(vec![message])
                .map_err(|_| Error::Busy(format!("session {} is running", self.id)))?;
            return Ok(CustomSent {
                run_id: Some(run_id),
                ..CustomSent::default()
            });
        }
        let entry_id = self.append_now(entry, Some(message))?;
        Ok(CustomSent {
            entry_id: Some(entry_id),
            ..CustomSent::default()
        })
    }

    /// Sets the queue modes given (steering, follow-up); returns both modes now.
    pub fn set_queue_modes(
        &self,
        steering: Option<QueueMode>,
        follow_up: Option<QueueMode>,
    ) -> (QueueMode, QueueMode) {
        let (st, fu) = self.agent.queue_modes();
        let st = steering.unwrap_or(st);
        let fu = follow_up.unwrap_or(fu);
        self.agent.set_queue_modes(st, fu);
        (st, fu)
    }

    /// Drops every queued message (Pi's `clearQueue`), each reported `dropped`; messages
    /// queued by others (untracked) are put back.
    pub async fn clear_queue(&self) -> Vec<QueuedMessage> {
        let taken = self.agent.take_queued();
        let (dropped, keep) = self.tracker.drop_all(taken);
        for m in keep {
            self.agent.enqueue(m, DeliverAs::NextTurn);
        }
        for d in &dropped {
            self.tell(self.tracker.queue_notice(d.clone(), QueueState::Dropped))
                .await;
        }
        dropped
    }

    /// Takes the queued (not yet delivered) message `queue_id` out; false when it is not
    /// queued (delivered already, dropped, or unknown).
    pub async fn remove_queued(&self, queue_id: &str) -> bool {
        let removed = self
            .tracker
            .remove(queue_id, |m| self.agent.replace_queued(m, None));
        match removed {
            Some(r) => {
                self.tell(self.tracker.queue_notice(r, QueueState::Removed))
                    .await;
                true
            }
            None => false,
        }
    }

    /// Gives the queued message `queue_id` the text `text` (expanded like a prompt; images
    /// stay); false when it is not queued. A queued shell command's output cannot be edited.
    pub async fn edit_queued(&self, queue_id: &str, text: &str) -> Result<bool, Error> {
        let edited = self
            .tracker
            .edit(
                queue_id,
                text,
                |t| self.expand(t),
                |old, new| self.agent.replace_queued(old, Some(new)),
            )
            .map_err(|e| invalid("queueId", e))?;
        match edited {
            Some(r) => {
                self.tell(self.tracker.queue_notice(r, QueueState::Queued))
                    .await;
                Ok(true)
            }
            None => Ok(false),
        }
    }

    /// Pi's `abort_retry`: when a failed request waits for its retry, stops retrying and ends
    /// the run (waiting at most [`ABORT_WAIT`]); otherwise changes nothing.
    pub async fn abort_retry(&self) -> bool {
        if !self.tracker.retrying() {
            return false;
        }
        let cancelled = self.agent.abort();
        let _ = tokio::time::timeout(ABORT_WAIT, self.agent.wait_for_idle()).await;
        cancelled
    }

    /// Stops the active run (idempotent) and waits for it to end (at most [`ABORT_WAIT`]) so
    /// the report is complete.
    pub async fn abort(&self) -> AbortReport {
        let (calls, procs) = self.tracker.active();
        let run_id = self
            .agent
            .is_streaming()
            .then(|| self.agent.run_id())
            .flatten();
        let aborted = self.agent.abort();
        if !aborted {
            return AbortReport {
                aborted,
                run_id: None,
                stopped_tool_calls: Vec::new(),
                stopped_processes: Vec::new(),
                applied_edits: Vec::new(),
                pending_edits: self.tracker.pending_edits(),
                queued_messages: self.tracker.queued(),
            };
        }
        let _ = tokio::time::timeout(ABORT_WAIT, self.agent.wait_for_idle()).await;
        AbortReport {
            aborted,
            run_id,
            stopped_tool_calls: calls,
            stopped_processes: procs,
            applied_edits: self.tracker.edits(),
            pending_edits: self.tracker.pending_edits(),
            queued_messages: self.tracker.queued(),
        }
    }

    /// Compacts the conversation now (Pi's `compact`), once the `compaction` entry is
    /// written. The session is busy meanwhile (prompts are queued after it); asked for during
    /// a run, it waits until the run settles. [`AgentSession::abort`] cancels it, as does
    /// dropping the returned future (nothing is written then).
    pub async fn compact(&self, instructions: Option<String>) -> Result<CompactionResult, Error> {
        self.ensure_context();
        self.reconfigure();
        let (_, control, rx) = self.agent.compact(instructions).map_err(|_| {
            Error::Busy(format!(
                "session {} already has a compaction waiting",
                self.id
            ))
        })?;
        let cancel_on_drop = control.cancel.clone().drop_guard();
        let outcome = rx.await;
        cancel_on_drop.disarm();
        match outcome {
            Ok(Ok(r)) => Ok(r),
            Ok(Err(e)) => Err(Error::Compaction(e.to_string())),
            Err(_) => Err(Error::Compaction(
                "the compaction ended without a result".into(),
            )),
        }
    }

    /// Runs the user's own shell command (Pi's `!cmd` / `!!cmd`) in the workspace through the
    /// same `bash` tool the model uses (process group, Pi's output limits, spill file), outside
    /// any run and outside the agent's sandbox. Its result is stored as a `bashExecution`
    /// message (`excludeFromContext` for `!!`): at once when the session is idle; while a run
    /// is active, after it (Pi defers it so a tool call and its result stay adjacent) — queued
    /// for the next prompt when it enters the context, written when the run ends otherwise.
    /// Dropping the returned future kills the command.
    pub async fn bash(
        self: &Arc<Self>,
        command: &str,
        exclude_from_context: bool,
    ) -> Result<BashOutcome, Error> {
        if command.trim().is_empty() {
            return Err(invalid("command", "must not be empty"));
        }
        let Some(cancel) = self.tracker.start_bash() else {
            return Err(Error::BashRunning(format!(
                "a command started with agent/bash is still running in session {}; agent/bash/abort it first",
                self.id
            )));
        };
        // The user's own command: outside the agent's sandbox (security issue: "user-run bash
        // excluded"), with the same output limits, process-group kill and key redaction.
        let root = self.ws.root().to_path_buf();
        let unsandboxed = crate::sandbox::SandboxSettings {
            mode: Some(crate::sandbox::SandboxMode::Off),
            ..Default::default()
        };
        let tool = crate::tools::BashTool::with_sandbox(
            root.clone(),
            None,
            crate::sandbox::Sandbox::new(&root, &unsandboxed),
            None,
        );
        let ctx = ToolContext {
            call_id: format!("user-bash-{}", uuid::Uuid::now_v7()),
            turn: 0,
            cancel: cancel.clone(),
            on_update: Arc::new(|_| {}),
            model_input: None,
        };
        // The command counts as running until its result is stored (or queued), so that a
        // close can wait for both; the guard ends it on every return path.
        let _running = EndBash(self.tracker.clone());
        // The command runs in its own task; a dropped future still kills it.
        let kill_on_drop = cancel.clone().drop_guard();
        let args = json!({"command": command});
        let outcome = match tokio::spawn(async move { tool.execute(ctx, args).await }).await {
            Ok(o) => o,
            Err(e) => Err(crate::agent::ToolError::new(format!(
                "the command's task failed: {e}"
            ))),
        };
        kill_on_drop.disarm();
        let (text, details) = match outcome {
            Ok(o) => (pi_ai::join_text(&o.content), o.details),
            Err(e) => (e.message, e.details),
        };
        // The tool's `details.exitCode` (from the process status); only a command that did
        // not exit with 0 has a status line after its output.
        let exit_code = details
            .as_ref()
            .and_then(|d| d.get("exitCode"))
            .and_then(Value::as_i64)
            .and_then(|c| i32::try_from(c).ok());
        let output = if exit_code == Some(0) {
            text
        } else {
            split_status(&text).0
        };
        let full_output_path = details
            .as_ref()
            .and_then(|d| d["fullOutputPath"].as_str())
            .map(str::to_string);
        // Pi 1.6 stores a cut output as the plain tail: no notice inside it.
        let output = match &full_output_path {
            Some(path) => crate::tools::without_truncation_notice(&output, path).to_string(),
            None => output,
        };
        let output = if output == "(no output)" {
            String::new()
        } else {
            output
        };
        let cancelled = cancel.is_cancelled();
        // Pi leaves `fullOutputPath` out when the output was not cut.
        let execution = BashExecution {
            command: command.to_string(),
            output: output.clone(),
            exit_code,
            cancelled,
            truncated: full_output_path.is_some(),
            timestamp: pi_ai::types::now_millis(),
            full_output_path: full_output_path.clone(),
            exclude_from_context,
        };
        let mut result = BashOutcome {
            output,
            exit_code,
            cancelled,
            truncated: full_output_path.is_some(),
            full_output_path,
            entry_id: None,
            queue_id: None,
        };
        let message = serde_json::to_value(&execution)
            .ok()
            .and_then(|raw| crate::session::convert_message(&raw));
        let entry = EntryData::Message {
            message: StoredMessage::BashExecution(execution),
        };
        if !self.agent.is_streaming() {
            result.entry_id = Some(self.append_now(entry, message)?);
            return Ok(result);
        }
        match message {
            // In the context: it goes with the next prompt and is stored as it is delivered.
            Some(m) => {
                let (q, _) = self.queue(DeliverAs::NextTurn, m, Some(entry)).await;
                result.queue_id = Some(q.queue_id);
            }
            // Kept out of the context: stored once the run has ended.
            None => {
                tokio::spawn(self.clone().write_when_idle(entry));
            }
        }
        Ok(result)
    }

    /// Kills the running user shell command's process group; false when none runs.
    pub fn abort_bash(&self) -> bool {
        self.tracker.abort_bash()
    }

    /// Appends `entry` once no run is active.
    async fn write_when_idle(self: Arc<Self>, entry: EntryData) {
        loop {
            self.agent.wait_for_idle().await;
            if self.agent.is_streaming() {
                continue;
            }
            if let Err(e) = self.append_now(entry, None) {
                tracing::error!("shell output not saved: {e}");
            }
            return;
        }
    }

    /// Appends a message-like entry to an idle session now: to the file, and (when `message`
    /// is model-visible) to the agent's context. Returns the entry id.
    fn append_now(&self, entry: EntryData, message: Option<Message>) -> Result<String, Error> {
        if self.agent.is_streaming() {
            return Err(Error::Busy(format!("session {} is running", self.id)));
        }
        // Built before the entry is appended: the message is added to it below.
        self.ensure_context();
        let id = self.lock_writer()?.append(entry)?;
        if let Some(m) = message {
            let mut messages = self.agent.messages();
            messages.push(m);
            let _ = self.agent.set_messages(messages);
        }
        Ok(id)
    }

    /// Closes the session's work: aborts its run, stops the user's command (left running it
    /// would write its result after the file was released), waits for both (at most
    /// [`ABORT_WAIT`] each), drops the queue and releases the file (synced, unlocked: later
    /// appends fail); returns the dropped messages. The product forgets the session then
    /// ([`super::Sessions::close`]).
    pub async fn close(&self) -> Vec<QueuedMessage> {
        self.agent.abort();
        if self.tracker.abort_bash() {
            let _ = tokio::time::timeout(ABORT_WAIT, async {
                while self.tracker.bash_running() {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            })
            .await;
        }
        let _ = tokio::time::timeout(ABORT_WAIT, self.agent.wait_for_idle()).await;
        // Released now, not when the last holder of the session lets go of it (a request in
        // flight): another process may open it next. Before the queue is dropped (which
        // writes nothing): the product forgets the session right after the `dropped`
        // notices.
        if let Err(e) = self.close_file() {
            tracing::warn!("session {}: final sync failed: {e}", self.id);
        }
        self.clear_queue().await
    }

    /// The entry `entry_id`, or [`Error::UnknownEntry`].
    fn entry_error(&self, entry_id: &str) -> Error {
        Error::UnknownEntry(format!(
            "entryId: no entry {entry_id} in session {}",
            self.id
        ))
    }

    /// Where navigating to `entry_id` puts the leaf: a user message (or custom message) is
    /// left out, its text returned for the editor; any other entry becomes the leaf.
    fn leaf_for(
        &self,
        tree: &crate::session::SessionTree,
        entry_id: &str,
    ) -> Result<(Option<String>, Option<String>), Error> {
        let e = tree
            .get(entry_id)
            .ok_or_else(|| self.entry_error(entry_id))?;
        let user = (e.kind == "message" && e.role() == Some("user")) || e.kind == "custom_message";
        Ok(if user {
            (
                e.parent_id.as_deref().map(str::to_string),
                entry_text(&e.raw()),
            )
        } else {
            (Some(e.id.to_string()), None)
        })
    }

    /// Pi's `fork`: a new session file holding the path to `entry_id` (to its parent for a
    /// user message, whose text is returned); returns the new file's path, released for the
    /// caller to open.
    pub fn fork(&self, entry_id: &str) -> Result<(PathBuf, Option<String>), Error> {
        let (tree, _) = self.tree()?;
        let (leaf, text) = self.leaf_for(&tree, entry_id)?;
        let Some(leaf) = leaf else {
            return Err(invalid(
                "entryId",
                "the first entry has nothing before it to fork; use agent/session/new",
            ));
        };
        let (w, _) = self
            .lock_writer()?
            .fork(&tree, &sessions_dir(&self.ws), Some(&leaf))?;
        Ok((w.path().to_path_buf(), text))
    }

    /// Pi's `clone`: a new session file holding the active branch; returns its path, released
    /// for the caller to open.
    pub fn clone_branch(&self) -> Result<PathBuf, Error> {
        let (tree, leaf) = self.tree()?;
        if leaf.is_none() {
            return Err(invalid(
                "sessionId",
                "the session has no entries to clone; use agent/session/new",
            ));
        }
        let (w, _) = self
            .lock_writer()?
            .fork(&tree, &sessions_dir(&self.ws), None)?;
        Ok(w.path().to_path_buf())
    }

    /// Moves the leaf to `entry_id` (`None`: before the first entry; Pi's tree navigation);
    /// with `summarize`, the model summarises the branch left behind first, with
    /// `instructions` (a failed summary changes nothing; dropping the future cancels it).
    pub async fn branch(
        &self,
        entry_id: Option<&str>,
        summarize: bool,
        instructions: Option<&str>,
    ) -> Result<BranchOutcome, Error> {
        let options = NavigateOptions {
            custom_instructions: instructions.map(str::to_string),
            ..NavigateOptions::default()
        };
        self.branch_with(entry_id, summarize, &options).await
    }

    /// Moves the leaf to `entry_id` as Pi 1.6's `navigateTree(targetId, {summarize,
    /// customInstructions, replaceInstructions, label})` does ([`AgentSession::branch`]
    /// with all of Pi's options): the summary asked with the custom instructions as Pi's
    /// "Additional focus" or, with `replace_instructions`, instead of Pi's prompt, within the
    /// window less the workspace's `branchSummary.reserveTokens`; a non-empty `label` put on
    /// the summary entry, or on the target when there is no summary (a `label` entry, which
    /// becomes the leaf, as Pi's `appendLabelChange`). Nothing is done when the target is the
    /// leaf already.
    pub async fn branch_with(
        &self,
        entry_id: Option<&str>,
        summarize: bool,
        options: &NavigateOptions,
    ) -> Result<BranchOutcome, Error> {
        let busy = || {
            Error::Busy(format!(
                "session {} is running {}; moving the leaf waits until the run ends (or agent/abort it)",
                self.id,
                self.agent.run_id().unwrap_or_default()
            ))
        };
        // A client that saw `agent_end` may branch at once: the run's last bookkeeping first.
        self.agent.settle().await;
        if self.agent.is_streaming() {
            return Err(busy());
        }
        let (tree, old_leaf) = self.tree()?;
        let (target_leaf, editor_text) = match entry_id {
            None => (None, None),
            Some(id) => self.leaf_for(&tree, id)?,
        };
        // The entries being left (Pi 1.6's `collectEntriesForBranchSummary`): from the old leaf
        // back to its deepest common ancestor with the target's path — the target's own,
        // also for a user message whose parent becomes the leaf, so that message is not
        // summarised when it lies on the branch left.
        let kept: std::collections::HashSet<&str> = entry_id
            .map(|l| tree.path(l).into_iter().map(|e| e.id.as_str()).collect())
            .unwrap_or_default();
        let left: Vec<&crate::session::Entry> = old_leaf
            .as_deref()
            .map(|l| {
                tree.path(l)
                    .into_iter()
                    .filter(|e| !kept.contains(e.id.as_str()))
                    .collect()
            })
            .unwrap_or_default();
        let summary = if summarize && !left.is_empty() {
            let cancel = tokio_util::sync::CancellationToken::new();
            let _cancel_on_drop = cancel.clone().drop_guard();
            let summary_options = super::branch_summary::SummaryOptions {
                custom_instructions: options.custom_instructions.clone(),
                replace_instructions: options.replace_instructions,
                reserve_tokens: self.ws.settings().branch_summary_reserve_tokens,
            };
            // Pi 1.6 retries the summary request with `settings.retry` and tells it
            // (`summarization_retry_*` with `source: "branchSummary"`).
            let agent = self.agent_handle();
            let retry = agent.with_config(|c| c.retry.clone());
            let events = crate::agent::SummaryRetryEvents {
                sink: agent,
                source: crate::agent::SummarySource::BranchSummary,
                reason: None,
            };
            let retry = crate::compaction::SummaryRetry {
                policy: (retry.enabled && self.auto_retry()).then_some(&retry.policy),
                listener: Some(&events),
            };
            Some(
                super::branch_summary::branch_summary_with(
                    &self.model(),
                    &left,
                    &summary_options,
                    retry,
                    &cancel,
                )
                .await
                .map_err(Error::Summary)?,
            )
        } else {
            None
        };
        if self.agent.is_streaming() {
            return Err(busy());
        }
        let (summary_entry_id, leaf) = {
            let mut w = self.lock_writer()?;
            let id = match (&summary, &old_leaf) {
                (Some(s), Some(_)) => Some(w.branch_with_summary(
                    &tree,
                    target_leaf.as_deref(),
                    &s.summary,
                    s.details.clone(),
                    s.usage.clone(),
                )?),
                _ => {
                    w.branch(&tree, target_leaf.as_deref())?;
                    None
                }
            };
            // Pi: the label on the summary entry, else on the target (not when the target
            // was the leaf already: Pi's navigation stops before).
            let label = options.label.as_deref().filter(|l| !l.is_empty());
            let labelled = id
                .as_deref()
                .or(entry_id.filter(|t| *t != old_leaf.as_deref().unwrap_or_default()));
            if let (Some(label), Some(target)) = (label, labelled) {
                w.label(target, Some(label))?;
            }
            (id, w.leaf().map(str::to_string))
        };
        let (tree, _) = self.tree()?;
        let (messages, usage_from) = if leaf.is_some() {
            let context = tree.context(leaf.as_deref());
            (context.messages, context.usage_from)
        } else {
            (Vec::new(), 0)
        };
        // Pi 1.6's count: the stored system messages the branch replays too.
        let count = messages.len()
            + leaf
                .as_deref()
                .map_or(0, |l| tree.system_message_count(Some(l)));
        self.set_messages(messages, usage_from)
            .map_err(|_| busy())?;
        Ok(BranchOutcome {
            leaf_id: leaf,
            summary_entry_id,
            summary: summary.map(|s| s.summary),
            editor_text,
            message_count: count,
        })
    }

    /// Labels entry `entry_id` (`None` or blank: clears its label); returns the `label`
    /// entry written.
    pub fn label(&self, entry_id: &str, label: Option<&str>) -> Result<String, Error> {
        let (tree, _) = self.tree()?;
        if tree.get(entry_id).is_none() {
            return Err(self.entry_error(entry_id));
        }
        let label = label.map(str::trim).filter(|l| !l.is_empty());
        Ok(self.lock_writer()?.label(entry_id, label)?)
    }
}

/// A custom message's entry and the model's view of it, as the session loader builds it.
fn custom_parts(m: &CustomMessage) -> Result<(EntryData, Message), Error> {
    let entry = EntryData::CustomMessage {
        custom_type: m.custom_type.clone(),
        content: m.content.clone(),
        display: m.display,
        details: m.details.clone(),
    };
    let mut as_message = entry.clone().into_parts().1;
    as_message["role"] = json!("custom");
    as_message["timestamp"] = json!(pi_ai::types::now_millis());
    let message = crate::session::convert_message(&as_message)
        .ok_or_else(|| invalid("content", "expected a string or text/image blocks"))?;
    Ok((entry, message))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_lines_are_split_off() {
        assert_eq!(
            split_status("a\n\nb\n\nCommand exited with code 3"),
            ("a\n\nb".into(), Some("Command exited with code 3".into()))
        );
        assert_eq!(split_status("x\n\ny"), ("x\n\ny".into(), None));
    }
}

//! Persisting a session's events: each completed message becomes a `message` entry as it ends;
//! turn and run ends make the file durable. Images replaced after a size refusal are replaced
//! in the request only: the file keeps them (issue 29 item 10).
//!
//! Every failure is returned, including a writer whose lock another thread poisoned by
//! panicking while it appended (an entry may be half written then): the caller tells the user
//! the session is no longer being saved and stops the run. Saving never fails silently.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use pi_ai::Message;
use serde_json::{json, Map, Value};

use crate::agent::AgentEvent;
use crate::session::{
    lock_writer, EntryData, MessageJson, SessionError, SessionWriter, SystemState,
};

/// Appends a run's messages to its session file; see the module doc.
pub struct Recorder {
    writer: Arc<Mutex<SessionWriter>>,
    /// Write Pi 1.6's entries and fields (setting `sessions.format`, [`crate::session::writes_pi16`]).
    pi16: bool,
    /// When the streaming assistant message and each running tool call started.
    started: parking_lot::Mutex<Started>,
}

/// Start times of what is running, for Pi 1.6's `durationMs`.
#[derive(Default)]
struct Started {
    assistant: Option<Instant>,
    tools: Vec<(String, Instant)>,
    /// The entries of the last response when it failed or stopped at `length` (the assistant
    /// message, then any results of its calls): what a retry, or the compact-and-retry of an
    /// overflow or a recoverable `length` stop, leaves out of the context.
    failed: Vec<String>,
}

/// Milliseconds since `t`.
fn millis_since(t: Instant) -> u64 {
    u64::try_from(t.elapsed().as_millis()).unwrap_or(u64::MAX)
}

/// `a` without what Pi 1.6 added to assistant messages (`rawStopReason`, `thinkingLevel`,
/// `providerThinkingLevel`, `usage.reasoning`,
/// `usage.cacheWrite1h`, `usage.cost.totalFromProvider`), for files written as Pi 0.73.1
/// wrote them; `None` when it has none of them.
fn without_pi16_fields(a: &pi_ai::AssistantMessage) -> Option<pi_ai::AssistantMessage> {
    let u = &a.usage;
    if a.raw_stop_reason.is_none()
        && a.thinking_level.is_none()
        && a.provider_thinking_level.is_none()
        && u.reasoning.is_none()
        && u.cache_write_1h.is_none()
        && u.cost.total_from_provider.is_none()
    {
        return None;
    }
    let mut a = a.clone();
    a.raw_stop_reason = None;
    a.thinking_level = None;
    a.provider_thinking_level = None;
    a.usage.reasoning = None;
    a.usage.cache_write_1h = None;
    a.usage.cost.total_from_provider = None;
    Some(a)
}

/// Stores in `writer` the system message that takes the branch's replayed prompt and tools to
/// those `agent`'s configuration calls for (Pi 1.6: the first request of a session stores them
/// all, a change stores a patch; [`SystemState::of_run`], [`SystemState::patch_to`]); nothing
/// when they are the same. The writer remembers the configuration ([`crate::agent::Agent::config_generation`])
/// and the leaf it last found stored ([`SessionWriter::system_checked`]): a run started by
/// `AgentSession::start`, which stored it, is not checked again at its `agent_start`, and
/// neither is a run on an unchanged branch and configuration.
pub(super) fn store_system(
    writer: &Mutex<SessionWriter>,
    agent: &crate::agent::Agent,
) -> Result<(), SessionError> {
    let now = agent.config_generation();
    if lock_writer(writer)?.system_checked(now) {
        return Ok(());
    }
    // The run's prompt is not copied out: `want` renders it ([`SystemState::of_run`]), and
    // it is rendered only when the sections' order differs ([`replayed_prompt`]).
    let (mut want, generation) = agent.with_config_generation(|c, generation| {
        let specs: Vec<pi_ai::ToolSpec> = c.tools.iter().map(|t| t.spec()).collect();
        let want = SystemState::of_run(&c.system_prompt, c.prompt_sections.as_deref(), &specs);
        (want, generation)
    });
    let mut w = lock_writer(writer)?;
    let have = w.tree().system_state(w.leaf());
    crate::mcp::keep_declared(&have, &mut want);
    let patch = have.patch_to(&want, pi_ai::types::now_millis());
    // Pi 1.6 sends what the branch replays to after the patch: its sections keep their stored
    // order (one new since comes last). Only when that order is not the run's is it told.
    w.set_replayed_prompt(replayed_prompt(&have, &want));
    if let Some(m) = patch {
        // Written from the message itself, which is then kept to be told (no copy of it).
        w.append_message_value(&m)?;
        w.set_untold_system(m);
    }
    w.mark_system_checked(generation);
    Ok(())
}

/// The system prompt the branch's stored state `have`, once patched to `want` (the run's,
/// [`SystemState::of_run`]), renders when its sections come in another order than the run's
/// (a section the run adds goes after those stored before it; Pi 1.6's
/// `getCurrentSystemPrompt`); `None` when the order is the run's, or the stored state has
/// content of its own. Only the sections' names are compared until the orders differ: then
/// the run's prompt is rendered from `want` (its sections in the run's order render it: no
/// content, every section a string), and the replayed one.
fn replayed_prompt(have: &SystemState, want: &SystemState) -> Option<String> {
    let kept = have
        .sections
        .keys()
        .filter(|k| want.sections.contains_key(*k));
    let added = want
        .sections
        .keys()
        .filter(|k| !have.sections.contains_key(*k));
    let order: Vec<&String> = kept.chain(added).collect();
    if !have.content.is_empty() || order.iter().copied().eq(want.sections.keys()) {
        return None;
    }
    let mut after = SystemState {
        sections: order
            .into_iter()
            .map(|k| (k.clone(), want.sections[k].clone()))
            .collect(),
        ..SystemState::default()
    };
    after.seen = true;
    let prompt = want.render();
    let replayed = after.render();
    (replayed != prompt && after.renders(&prompt)).then_some(replayed)
}

impl Recorder {
    /// A recorder appending to `writer`.
    pub fn new(writer: Arc<Mutex<SessionWriter>>) -> Self {
        Self::with_format(writer, true)
    }

    /// A recorder appending to `writer`; `pi16`: with Pi 1.6's entries and fields (stored
    /// system messages, `durationMs`, `thinkingLevel`), else as Pi 0.73.1 wrote files.
    pub fn with_format(writer: Arc<Mutex<SessionWriter>>, pi16: bool) -> Self {
        Recorder {
            writer,
            pi16,
            started: parking_lot::Mutex::new(Started::default()),
        }
    }

    /// Whether this recorder writes Pi 1.6's entries and fields.
    pub fn pi16(&self) -> bool {
        self.pi16
    }

    /// Stores the system message that takes the branch's replayed prompt and tools to those
    /// of `agent`'s configuration ([`store_system`]); nothing when writing as Pi 0.73.1.
    pub fn record_system(&self, agent: &crate::agent::Agent) -> Result<(), SessionError> {
        if !self.pi16 {
            return Ok(());
        }
        store_system(&self.writer, agent)
    }

    /// The system message stored since this was last asked, to be told as Pi 1.6 tells it:
    /// `message_start` / `message_end` after its run's first `turn_start`.
    pub fn take_untold_system(&self) -> Option<Value> {
        lock_writer(&self.writer).ok()?.take_untold_system()
    }

    /// Records `event` with Pi 1.6's stamps on what it stores: an assistant message's
    /// `durationMs` (from its `message_start`) and `thinkingLevel` (`thinking_level`, the
    /// level the request asked for), a tool result's `durationMs` (from its
    /// `tool_execution_start`). `json`: the JSON of the message the event carries when the
    /// caller made it ([`MessageJson`], shared with the session's listeners): the file's line
    /// is written from it.
    pub fn record_stamped(
        &self,
        event: &AgentEvent,
        thinking_level: Option<&str>,
        json: Option<&MessageJson>,
    ) -> Result<(), SessionError> {
        if !self.pi16 {
            return self.record(event);
        }
        match event {
            AgentEvent::MessageStart { message } if matches!(**message, Message::Assistant(_)) => {
                self.started.lock().assistant = Some(Instant::now())
            }
            AgentEvent::ToolExecutionStart { tool_call_id, .. } => self
                .started
                .lock()
                .tools
                .push((tool_call_id.clone(), Instant::now())),
            AgentEvent::MessageEnd { message } => {
                let mut stamps = Map::new();
                match &**message {
                    Message::Assistant(a) => {
                        if let Some(t) = self.started.lock().assistant.take() {
                            stamps.insert("durationMs".into(), json!(millis_since(t)));
                        }
                        // The loop stamps the level on the message itself (written with it).
                        if let Some(level) = thinking_level.filter(|_| a.thinking_level.is_none()) {
                            stamps.insert("thinkingLevel".into(), Value::from(level));
                        }
                    }
                    Message::ToolResult(r) => {
                        let mut started = self.started.lock();
                        if let Some(i) = started
                            .tools
                            .iter()
                            .position(|(id, _)| *id == r.tool_call_id)
                        {
                            let (_, t) = started.tools.swap_remove(i);
                            stamps.insert("durationMs".into(), json!(millis_since(t)));
                        }
                    }
                    Message::User(_) | Message::System(_) => {}
                }
                let json = json.filter(|j| j.is_of(message)).map(MessageJson::bytes);
                let mut w = lock_writer(&self.writer)?;
                let id = w.append_message_json(message, stamps, json)?;
                let mut started = self.started.lock();
                match &**message {
                    Message::Assistant(a) => {
                        started.failed.clear();
                        // A `length` stop too: the loop may leave it out of the context to
                        // compact and retry (`agent::is_recoverable_length`).
                        if matches!(
                            a.stop_reason,
                            pi_ai::types::StopReason::Error | pi_ai::types::StopReason::Length
                        ) {
                            started.failed.push(id);
                        }
                    }
                    Message::ToolResult(_) if !started.failed.is_empty() => started.failed.push(id),
                    _ => {}
                }
                return Ok(());
            }
            // Pi 1.6 leaves a failed response it retries (and its calls' results) out of the
            // context with a `context_edit` each (`replacement: null`), written after
            // `auto_retry_start` and before the retry (`_omitRecoveryAttempt`): Pi shows and
            // counts the session without them, as it does here. That attempt, an overflow's
            // and a recoverable `length` stop's are told by [`AgentEvent::AttemptLeftOut`],
            // which the session writes with [`Recorder::leave_out`].
            AgentEvent::AttemptLeftOut => return Ok(()),
            // Case 18.12 (issue 29 item E): the images a size refusal replaced by notes in the
            // agent's context are replaced so in the file's context too (a `context_edit` per
            // entry holding one), so a resumed session, here or in Pi 1.6, does not send them
            // again; the entries keep them.
            AgentEvent::ImagesReplaced { images } => {
                let replaced: std::collections::HashMap<String, String> = images
                    .iter()
                    .map(|i| (i.hash.clone(), i.note.clone()))
                    .collect();
                return lock_writer(&self.writer)?
                    .edit_out_images(&replaced)
                    .map(|_| ());
            }
            // The failed response stays known past its run's end: an overflow's or a
            // recoverable `length` stop's attempt is left out after it (Pi 1.6's
            // `_checkCompaction` after its agent loop), and the next response replaces it.
            AgentEvent::AgentEnd { .. } => {
                let mut started = self.started.lock();
                started.assistant = None;
                started.tools.clear();
            }
            _ => {}
        }
        self.record(event)
    }

    /// Leaves the last response, when it failed or stopped at `length`, and its calls' results
    /// out of the context: a `context_edit` each (`replacement: null`), as Pi 1.6's
    /// `_omitRecoveryAttempt` writes them before a retry and before the compaction of an
    /// overflow's or a recoverable `length` stop's compact-and-retry
    /// ([`AgentEvent::AttemptLeftOut`]). Returns the entries written, whole as in the file
    /// (none when writing as Pi 0.73.1, whose files have no `context_edit`).
    pub fn leave_out(&self) -> Result<Vec<Value>, SessionError> {
        let failed = std::mem::take(&mut self.started.lock().failed);
        if failed.is_empty() || !self.pi16 {
            return Ok(Vec::new());
        }
        let mut w = lock_writer(&self.writer)?;
        let mut written = Vec::with_capacity(failed.len());
        for target_id in failed {
            let id = w.append(EntryData::ContextEdit {
                target_id,
                replacement: None,
            })?;
            written.extend(w.tree().get(&id).map(|e| e.raw()));
        }
        Ok(written)
    }

    /// Appends the entry `data` (a delivered custom message or shell output stored as what it
    /// is rather than as a plain user message).
    pub fn record_entry(&self, data: EntryData) -> Result<(), SessionError> {
        let mut w = lock_writer(&self.writer)?;
        w.append(data).map(|_| ())
    }

    /// Records `event`; an error means the session is no longer being saved.
    pub fn record(&self, event: &AgentEvent) -> Result<(), SessionError> {
        if !matches!(
            event,
            AgentEvent::MessageEnd { .. }
                | AgentEvent::TurnEnd { .. }
                | AgentEvent::AgentEnd { .. }
        ) {
            return Ok(());
        }
        let mut w = lock_writer(&self.writer)?;
        match event {
            AgentEvent::MessageEnd { message } => {
                // Pi 0.73.1's assistant messages: none of 1.6's stop and usage fields.
                let plain = match &**message {
                    Message::Assistant(a) if !self.pi16 => {
                        without_pi16_fields(a).map(Message::Assistant)
                    }
                    _ => None,
                };
                w.append_message(plain.as_ref().unwrap_or(message))
                    .map(|_| ())
            }
            // Entries the file could not take before are written first (after a full disk
            // freed space); the turn is durable only when they are. A turn inside a run asks
            // for a sync at most once per `TURN_SYNC_INTERVAL`; the run's end always does.
            AgentEvent::TurnEnd { .. } => {
                w.flush_unsaved()?;
                w.sync_turn()
            }
            _ => {
                w.flush_unsaved()?;
                w.sync()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The lines of the session file at `path`, parsed.
    fn lines(path: &std::path::Path) -> Vec<Value> {
        std::fs::read_to_string(path)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    /// The system message a configuration calls for is stored once; the writer remembers the
    /// configuration and leaf it was found at, so asking again stores nothing until the
    /// configuration changes (a patch then, whole values) or another entry moves the leaf
    /// (checked again: nothing to store, the branch holds it).
    #[test]
    fn the_system_message_is_checked_once_per_configuration_and_leaf() {
        let dir_tmp = tempfile::tempdir().unwrap();
        let dir = dir_tmp.path().to_path_buf();
        let writer = SessionWriter::create(&dir, &dir, "p", "m", "off").unwrap();
        let path = writer.path().to_path_buf();
        let writer = Arc::new(Mutex::new(writer));
        let model = crate::harness::setup::scripted_model();
        let agent = crate::agent::Agent::new(
            crate::agent::AgentConfig::new(model.clone(), "prompt one".into(), Vec::new()),
            Vec::new(),
        );
        let first = agent.config_generation();
        assert!(!writer.lock().unwrap().system_checked(first));
        store_system(&writer, &agent).unwrap();
        let after_first = lines(&path);
        assert_eq!(after_first.len(), 4);
        let m = &after_first[3]["message"];
        assert_eq!(m["role"], "system");
        assert_eq!(m["sections"], json!({"prompt": "prompt one"}));
        assert!(writer.lock().unwrap().system_checked(first));
        store_system(&writer, &agent).unwrap();
        assert_eq!(lines(&path), after_first);

        // Another configuration: its patch, found at the new leaf.
        agent.set_config(crate::agent::AgentConfig::new(
            model,
            "prompt two".into(),
            Vec::new(),
        ));
        let second = agent.config_generation();
        assert_ne!(second, first);
        assert!(!writer.lock().unwrap().system_checked(second));
        store_system(&writer, &agent).unwrap();
        let after_second = lines(&path);
        assert_eq!(after_second.len(), 5);
        assert_eq!(after_second[4]["message"]["role"], "system");
        assert_eq!(
            after_second[4]["message"]["sections"],
            json!({"prompt": "prompt two"})
        );
        assert!(writer.lock().unwrap().system_checked(second));
        assert!(!writer.lock().unwrap().system_checked(first));

        // An entry after it: unchecked at the new leaf; checking again stores nothing.
        Recorder::new(writer.clone())
            .record(&AgentEvent::MessageEnd {
                message: Arc::new(pi_ai::Message::user_text("hi")),
            })
            .unwrap();
        assert!(!writer.lock().unwrap().system_checked(second));
        store_system(&writer, &agent).unwrap();
        assert_eq!(lines(&path).len(), 6);
        assert!(writer.lock().unwrap().system_checked(second));
    }

    /// Pi 1.6 sends the prompt the branch replays to; it is told (and the run sends it) only
    /// when its sections' order is not the run's: a section the run adds comes after those
    /// the branch stored, one it changes keeps its place, one it drops goes.
    #[test]
    fn the_replayed_prompt_is_told_only_when_its_order_is_not_the_runs() {
        let run = |pairs: &[(&str, &str)]| {
            let sections: Vec<(String, String)> = pairs
                .iter()
                .map(|(n, t)| (n.to_string(), t.to_string()))
                .collect();
            let prompt = crate::prompt::render_sections(&sections);
            let want = SystemState::of_run(&prompt, Some(&sections), &[]);
            // The run's prompt, as `replayed_prompt` renders it from `want`.
            assert_eq!(want.render(), prompt);
            want
        };
        let stored = |pairs: &[(&str, &str)]| {
            let mut have = SystemState::default();
            have.apply(&SystemState::default().patch_to(&run(pairs), 1).unwrap());
            have
        };
        let have = stored(&[("a", "A"), ("c", "C"), ("d", "D")]);
        let want = run(&[("a", "A"), ("b", "B"), ("c", "C2")]);
        assert_eq!(
            replayed_prompt(&have, &want).as_deref(),
            Some("A\n\nC2\n\nB")
        );
        // The same order as the run's (a change in place, one dropped): nothing to tell.
        let want = run(&[("a", "A2"), ("c", "C")]);
        assert_eq!(replayed_prompt(&have, &want), None);
        // Stored content of its own (an extension's forced prompt): the run's prompt.
        let mut with_content = have.clone();
        with_content.content.push("forced".into());
        let want = run(&[("a", "A"), ("b", "B"), ("c", "C2")]);
        assert_eq!(replayed_prompt(&with_content, &want), None);
        // A prompt stored as one section (no sections, or sections that do not render it)
        // is rendered back as it is.
        for (prompt, sections) in [
            ("one\n\ntwo", None),
            ("", None),
            ("other", Some(vec![("a".to_string(), "A".to_string())])),
        ] {
            let want = SystemState::of_run(prompt, sections.as_deref(), &[]);
            assert_eq!(want.render(), prompt);
        }
    }

    #[test]
    fn a_poisoned_writer_is_an_error_not_silence() {
        let dir_tmp = tempfile::tempdir().unwrap();
        let dir = dir_tmp.path().to_path_buf();
        let writer = SessionWriter::create(&dir, &dir, "p", "m", "off").unwrap();
        let writer = Arc::new(Mutex::new(writer));
        let rec = Recorder::new(writer.clone());
        let end = AgentEvent::MessageEnd {
            message: Arc::new(pi_ai::Message::user_text("hi")),
        };
        rec.record(&end).unwrap();
        let w = writer.clone();
        let _ = std::thread::spawn(move || {
            let _guard = w.lock().unwrap();
            panic!("poison the writer");
        })
        .join();
        let e = rec.record(&end).unwrap_err();
        assert!(
            e.to_string()
                .contains("a writer of this session panicked while appending"),
            "{e}"
        );
        assert!(rec
            .record_entry(EntryData::Custom {
                custom_type: "x".into(),
                data: serde_json::json!(1),
            })
            .is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }
}

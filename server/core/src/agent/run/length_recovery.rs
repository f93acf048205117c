//! Pi 1.6's recovery of an answer the context window cut, not the model (`isRecoverableLength`
//! in `@earendil-works/pi-ai` `utils/overflow.js`, called by the coding agent's
//! `AgentSession._checkCompaction`).
//!
//! An answer that stopped with `length` while its output stayed below the model's own
//! `maxTokens` was cut by something else than the model's limit (the window's room, a
//! provider-side cut). Pi 1.6 then, after its agent loop ended (`turn_end`, `agent_end`),
//! leaves the answer out of the context with a `context_edit` (`replacement: null`, told by
//! `entry_appended`; here [`super::AgentEvent::AttemptLeftOut`], whose entry the session's
//! recorder writes, as for an overflow error), compacts the session (`compaction_start` /
//! `compaction_end`, reason `overflow`, `willRetry: true`) and asks again as a new run
//! (`agent_start`, `turn_start`, …: Pi's `agent.continue()`), once per user turn (the flag it
//! shares with the overflow recovery, `_overflowRecoveryAttempted`: cleared by a user message
//! and by an answer that is neither `error` nor `length`). A second such answer stays in the
//! context and the recovery ends, after the run's `agent_end`, with `compaction_end` carrying
//! [`TRUNCATED_RECOVERY_FAILED`]. An answer that reached the model's `maxTokens`, an answer
//! with tool calls (their calls fail and the turn goes on, as Pi's loop does), and any answer
//! while compaction is off keep the plain `length` handling. Nor is an answer recovered when
//! steering or follow-up messages are queued as it ends: Pi's agent loop delivers them before
//! its run ends and the recovery is considered, so the cut answer stays in the context and
//! the next request answers the queued message (checked against Pi 1.6.0 in RPC mode).
//!
//! Where Pi's compaction finds nothing to summarise (`prepareCompaction` prepares nothing:
//! no compaction events at all, [`crate::compaction::Compactor::check`]) or fails, the answer
//! stays left out and no retry follows: the run is over with its one `agent_end` (Pi: nothing
//! printed, exit 0).

use pi_ai::{AssistantMessage, StopReason};

use super::Run;

/// Pi 1.6's `errorMessage` of the `compaction_end` after a second recoverable `length` stop
/// (`agent-session.js`, `_checkCompaction`).
pub const TRUNCATED_RECOVERY_FAILED: &str =
    "Truncated response recovery failed after one compact-and-retry attempt.";

/// Pi 1.6's `isRecoverableLength(message, model.maxTokens)`: stopped by `length` with fewer
/// output tokens (`usage.output`) than the model's `maxTokens` (`max_tokens`; 0 = unknown:
/// never recoverable).
pub fn is_recoverable_length(message: &AssistantMessage, max_tokens: u64) -> bool {
    message.stop_reason == StopReason::Length && max_tokens > 0 && message.usage.output < max_tokens
}

/// What the run does after a recoverable `length` stop.
pub(super) enum Recovery {
    /// The answer was left out and the session compacted: ask again.
    Retry,
    /// No retry: the run goes on with the answer as the turn's (a second cut answer, kept in
    /// the context), or ends at once when [`Run::attempt_left_out`] is set (the answer was
    /// left out and the compaction failed).
    End,
}

impl Run<'_> {
    /// Pi's reset of the one recovery (`_overflowRecoveryAttempted = false`) on an answer
    /// that is neither `error` nor `length`.
    pub(super) fn note_answer(&mut self, a: &AssistantMessage) {
        if !matches!(a.stop_reason, StopReason::Error | StopReason::Length) {
            self.overflow_recovered = false;
        }
    }

    /// The recovery of `a`, the last message of the context, when it is a recoverable
    /// `length` stop (see the module docs); `None` for any other answer.
    pub(super) async fn recover_length(&mut self, a: &AssistantMessage) -> Option<Recovery> {
        let compaction_on = self
            .cfg
            .compaction
            .as_ref()
            .is_some_and(|c| c.settings.enabled);
        // Steering or follow-ups queued by now are delivered first, as Pi 1.6's agent loop
        // delivers them before its run ends and the recovery is considered: the user's
        // message then resets the one recovery and the cut answer stays in the context.
        let (steering, follow_ups, _) = self.control.queued();
        if !compaction_on
            || self.control.cancel.is_cancelled()
            || !a.tool_calls().is_empty()
            || !is_recoverable_length(a, self.cfg.model.max_tokens)
            || steering + follow_ups > 0
        {
            return None;
        }
        if self.overflow_recovered {
            // Said after the run's end, as Pi 1.6's `_checkCompaction` says it.
            self.after_end = Some(super::recovery_failed(TRUNCATED_RECOVERY_FAILED));
            return Some(Recovery::End);
        }
        self.overflow_recovered = true;
        if self.leave_out_and_compact(a).await.is_err() {
            self.attempt_left_out = true;
            return Some(Recovery::End);
        }
        Some(Recovery::Retry)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(stop: StopReason, output: u64) -> AssistantMessage {
        let mut a = AssistantMessage::empty("openai-completions", "mock", "mock-1");
        a.stop_reason = stop;
        a.usage.output = output;
        a
    }

    /// Pi 1.6's `isRecoverableLength`: `length` below the model's `maxTokens` only.
    #[test]
    fn recoverable_length_is_a_length_stop_below_the_model_s_max_tokens() {
        let cases = [
            (StopReason::Length, 50, 4096),
            (StopReason::Length, 4095, 4096),
            (StopReason::Length, 4096, 4096),
            (StopReason::Length, 5000, 4096),
            (StopReason::Length, 0, 0),
            (StopReason::Stop, 50, 4096),
            (StopReason::Error, 0, 4096),
        ];
        let got: Vec<bool> = cases
            .iter()
            .map(|&(stop, output, max)| is_recoverable_length(&answer(stop, output), max))
            .collect();
        assert_eq!(got, [true, true, false, false, false, false, false]);
    }
}

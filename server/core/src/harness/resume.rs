//! Continuing a session as it stands (Pi's `agent.continue()`): the *Retry* of a failed run and
//! the *Continue* of an interrupted one, without a new user message (docs/protocol.md
//! `agent/continue`).

use pi_ai::types::{Message, StopReason};

use super::{AgentSession, Error};

/// Why the branch ending in `messages` has nothing to continue, or `None` when a run can start
/// from it: the last message the model would see (a failed or aborted reply is never sent) is
/// a user message, a tool result, or an assistant message whose tool calls were not answered.
pub fn nothing_to_continue(messages: &[Message]) -> Option<&'static str> {
    let last = messages.iter().rev().find(|m| {
        !matches!(m, Message::Assistant(a)
            if matches!(a.stop_reason, StopReason::Error | StopReason::Aborted)
                && a.tool_calls().is_empty())
    });
    match last {
        None => Some("the session has no message; send a prompt"),
        Some(Message::Assistant(a))
            if matches!(a.stop_reason, StopReason::Stop | StopReason::Length) =>
        {
            Some("the last reply completed; send a prompt")
        }
        Some(_) => None,
    }
}

impl AgentSession {
    /// Starts a run from the session's branch as it stands, without a new message (Pi's
    /// `agent.continue()`): after a failed or aborted run the user message is sent again once
    /// and stays stored once; after an interrupted run (the server went away mid-run) the run
    /// goes on from the last stored message. Returns the run id.
    ///
    /// A run whose `agent_end` was already sent is let finish first ([`AgentSession::settle`]):
    /// an editor offers *Retry* as soon as it sees the failed run's `agent_end`, while the loop
    /// still settles its state.
    ///
    /// Errors: a run is active → [`Error::Busy`]; nothing to continue ([`nothing_to_continue`])
    /// → [`Error::Invalid`] naming `sessionId`.
    pub async fn continue_run(&self) -> Result<String, Error> {
        self.settle().await;
        if self.agent.is_streaming() || self.agent.is_compacting() {
            return Err(self.busy_error());
        }
        self.ensure_context();
        if let Some(why) = nothing_to_continue(&self.agent.messages()) {
            return Err(Error::Invalid {
                field: "sessionId".into(),
                message: format!("nothing to continue: {why}"),
            });
        }
        self.start(Vec::new())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pi_ai::types::AssistantMessage;

    fn reply(stop: StopReason) -> Message {
        let mut a = AssistantMessage::empty("openai-completions", "mock", "m");
        a.stop_reason = stop;
        Message::Assistant(a)
    }

    #[test]
    fn what_can_be_continued() {
        let user = Message::user_text("hi");
        assert_eq!(
            nothing_to_continue(&[]),
            Some("the session has no message; send a prompt")
        );
        assert_eq!(nothing_to_continue(std::slice::from_ref(&user)), None);
        for failed in [StopReason::Error, StopReason::Aborted] {
            assert_eq!(nothing_to_continue(&[user.clone(), reply(failed)]), None);
        }
        for done in [StopReason::Stop, StopReason::Length] {
            assert_eq!(
                nothing_to_continue(&[user.clone(), reply(done)]),
                Some("the last reply completed; send a prompt")
            );
        }
        assert_eq!(
            nothing_to_continue(&[
                user.clone(),
                reply(StopReason::Stop),
                reply(StopReason::Error)
            ]),
            Some("the last reply completed; send a prompt")
        );
    }
}

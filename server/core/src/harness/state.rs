//! What a front door reads of a live session and the few switches it sets, as
//! [`AgentSession`] methods: the edge never holds the session's agent, writer, tracker, gate
//! or extensions (they stay the session's, so a second front door cannot take a session
//! apart differently).

use pi_ai::{AssistantMessage, Message};

use super::AgentSession;
use crate::agent::RunOutcome;
use crate::approval::{ApprovalPolicy, Rule};
use crate::extension::CommandInfo;
use crate::QueueMode;

/// A session's run state at one moment ([`AgentSession::status`]).
#[derive(Debug, Clone, PartialEq)]
pub struct SessionStatus {
    /// A run is active.
    pub is_streaming: bool,
    /// The id of the active run, or of the last one.
    pub run_id: Option<String>,
    /// A compaction writes its summary.
    pub is_compacting: bool,
    /// An automatic retry waits or runs.
    pub is_retrying: bool,
    /// The user's own shell command runs.
    pub is_bash_running: bool,
    /// How steering and follow-up messages are delivered.
    pub steering_mode: QueueMode,
    /// See `steering_mode`.
    pub follow_up_mode: QueueMode,
    /// Queued messages not yet delivered.
    pub pending_message_count: usize,
    /// The approval policy in effect.
    pub approval_policy: ApprovalPolicy,
}

impl AgentSession {
    /// The run state now (see [`SessionStatus`]).
    pub fn status(&self) -> SessionStatus {
        let (steering_mode, follow_up_mode) = self.agent.queue_modes();
        SessionStatus {
            is_streaming: self.agent.is_streaming(),
            run_id: self.agent.run_id(),
            is_compacting: self.agent.is_compacting(),
            is_retrying: self.tracker.retrying(),
            is_bash_running: self.tracker.bash_running(),
            steering_mode,
            follow_up_mode,
            pending_message_count: self.tracker.queued().len(),
            approval_policy: self.gate.policy(),
        }
    }

    /// The id of the active run, or of the last one.
    pub fn run_id(&self) -> Option<String> {
        self.agent.run_id()
    }

    /// The id of the active run; `None` when no run is active.
    pub fn active_run_id(&self) -> Option<String> {
        let st = &self.agent;
        st.is_streaming().then(|| st.run_id()).flatten()
    }

    /// Whether a run is active.
    pub fn is_streaming(&self) -> bool {
        self.agent.is_streaming()
    }

    /// The assistant response being streamed, if any.
    pub fn streaming_message(&self) -> Option<AssistantMessage> {
        self.agent.streaming_message()
    }

    /// The model context: every completed message of the branch (built first for a session
    /// opened without it).
    pub fn messages(&self) -> Vec<Message> {
        self.agent().messages()
    }

    /// Resolves when no run is active (at once when idle).
    pub async fn wait_for_idle(&self) {
        self.agent.wait_for_idle().await
    }

    /// Waits briefly for a run whose `agent_end` was already sent to let go of the session
    /// ([`crate::agent::Agent::settle`]): a client acting on `agent_end` (branch, rewind)
    /// is not told the session still runs.
    pub async fn settle(&self) {
        self.agent.settle().await
    }

    /// The outcome of the last finished run.
    pub fn last_outcome(&self) -> Option<RunOutcome> {
        self.agent.last_outcome()
    }

    /// Sets the session's own approval policy (`None`: back to the default); returns the
    /// policy in effect and the session's "allow always" rules.
    pub fn set_approval_policy(
        &self,
        policy: Option<ApprovalPolicy>,
    ) -> (ApprovalPolicy, Vec<Rule>) {
        self.gate.set_session_policy(policy);
        (self.gate.policy(), self.gate.session_rules())
    }

    /// The commands the session's extensions registered.
    pub fn extension_commands(&self) -> Vec<CommandInfo> {
        self.extensions.commands()
    }
}

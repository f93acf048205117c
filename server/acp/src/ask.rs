//! Asking the ACP client's user: the approval gate's questions ([`Asker`]) and the bash
//! sandbox's escalation ([`Approver`]) as `session/request_permission`.
//!
//! The options, by ACP kind: "Allow once" (`allow_once`, id `allow_once`); "Allow for this
//! session" (`allow_always`, id `allow_session`: the call's rule is remembered in memory) and
//! "Always allow in this workspace" (`allow_always`, id `allow_workspace`: the rule is saved to
//! `.pi/settings.json` "approvals", offered in a trusted workspace only) — both only when a
//! rule can cover the call; "Reject" (`reject_once`, id `reject_once`) and "Always reject in
//! this session" (`reject_always`, id `reject_always`: later calls the same rule would cover
//! are rejected without asking, until the session closes). The question's `toolCall` carries
//! the call's title, kind, locations, raw input and, for `edit` / `write`, the `diff`.
//!
//! The answer binds to what was shown: an edit's file is hashed when asked and again after
//! the answer (pi-core's gate); a file changed meanwhile is refused with a reason the model
//! reads. An answer naming an option that was not offered, a `cancelled` outcome, or a failed
//! request rejects the call.

use std::path::PathBuf;
use std::sync::Arc;

use agent_client_protocol_schema::v1::{
    PermissionOption, PermissionOptionKind, RequestPermissionOutcome, RequestPermissionRequest,
    RequestPermissionResponse, ToolCallUpdate, ToolCallUpdateFields,
};
use async_trait::async_trait;
use parking_lot::Mutex;
use pi_core::approval::{Answer, Asker, Question, Rule, Scope};
use pi_core::harness::Tracker;
use pi_core::sandbox::{Approver, Decision, PermissionRequest};

use crate::rpc::Conn;
use crate::tools;

/// Option ids offered by [`AcpAsker`].
pub mod option_ids {
    /// `allow_once`.
    pub const ALLOW_ONCE: &str = "allow_once";
    /// `allow_always`, remembered for the session.
    pub const ALLOW_SESSION: &str = "allow_session";
    /// `allow_always`, saved in the workspace's settings.
    pub const ALLOW_WORKSPACE: &str = "allow_workspace";
    /// `reject_once`.
    pub const REJECT_ONCE: &str = "reject_once";
    /// `reject_always`, for the session.
    pub const REJECT_ALWAYS: &str = "reject_always";
}

/// Asks the client of one session.
pub struct AcpAsker {
    conn: Arc<Conn>,
    session_id: String,
    cwd: PathBuf,
    tracker: Mutex<Option<Arc<Tracker>>>,
    /// Rules the user rejected for the rest of the session.
    rejected: Mutex<Vec<Rule>>,
}

impl AcpAsker {
    /// An asker over `conn` for session `session_id`; `cwd` resolves the tools' paths.
    pub fn new(conn: Arc<Conn>, session_id: String, cwd: PathBuf) -> Self {
        AcpAsker {
            conn,
            session_id,
            cwd,
            tracker: Mutex::new(None),
            rejected: Mutex::new(Vec::new()),
        }
    }

    /// Tells `tracker` which calls wait for an answer.
    pub fn set_tracker(&self, tracker: Arc<Tracker>) {
        *self.tracker.lock() = Some(tracker);
    }

    fn options(q: &Question) -> Vec<PermissionOption> {
        use option_ids::*;
        let mut o = vec![PermissionOption::new(
            ALLOW_ONCE,
            "Allow once",
            PermissionOptionKind::AllowOnce,
        )];
        if q.always_scopes.contains(&Scope::Session) {
            o.push(PermissionOption::new(
                ALLOW_SESSION,
                "Allow for this session",
                PermissionOptionKind::AllowAlways,
            ));
        }
        if q.always_scopes.contains(&Scope::Workspace) {
            o.push(PermissionOption::new(
                ALLOW_WORKSPACE,
                "Always allow in this workspace",
                PermissionOptionKind::AllowAlways,
            ));
        }
        o.push(PermissionOption::new(
            REJECT_ONCE,
            "Reject",
            PermissionOptionKind::RejectOnce,
        ));
        if q.rule.is_some() {
            o.push(PermissionOption::new(
                REJECT_ALWAYS,
                "Always reject in this session",
                PermissionOptionKind::RejectAlways,
            ));
        }
        o
    }

    async fn ask_client(&self, q: &Question) -> Answer {
        let session_id = self.session_id.clone();
        let options = Self::options(q);
        let mut content = tools::diffs(&self.cwd, &q.tool, &q.arguments);
        content.push(tools::text_content(q.reason.clone()));
        let fields = ToolCallUpdateFields::new()
            .title(tools::title(&q.tool, &q.arguments))
            .kind(tools::kind(&q.tool))
            .locations(tools::locations(&self.cwd, &q.tool, &q.arguments))
            .content(content)
            .raw_input(Some(q.arguments.clone()));
        let req = RequestPermissionRequest::new(
            session_id,
            ToolCallUpdate::new(q.tool_call_id.clone(), fields),
            options.clone(),
        );
        let answer = self.conn.request("session/request_permission", req).await;
        let picked = match answer.and_then(crate::rpc::parse_params::<RequestPermissionResponse>) {
            Ok(r) => r.outcome,
            Err(e) => {
                tracing::warn!("session/request_permission failed: {e}");
                return Answer::Reject {
                    reason: Some(format!("the permission request failed: {}", e.message)),
                };
            }
        };
        let id = match picked {
            RequestPermissionOutcome::Selected(s) => s.option_id.0.to_string(),
            RequestPermissionOutcome::Cancelled => {
                return Answer::Reject {
                    reason: Some("the question was cancelled".into()),
                }
            }
            _ => String::new(),
        };
        if !options.iter().any(|o| *o.option_id.0 == *id) {
            return Answer::Reject {
                reason: Some(format!(
                    "the client answered with an option that was not offered ({id:?})"
                )),
            };
        }
        match id.as_str() {
            option_ids::ALLOW_ONCE => Answer::Once,
            option_ids::ALLOW_SESSION => Answer::Always(Scope::Session),
            option_ids::ALLOW_WORKSPACE => Answer::Always(Scope::Workspace),
            option_ids::REJECT_ALWAYS => {
                if let Some(r) = &q.rule {
                    self.rejected.lock().push(r.clone());
                }
                Answer::Reject {
                    reason: Some("the user rejects such calls for this session".into()),
                }
            }
            _ => Answer::Reject {
                reason: Some("the user chose Reject".into()),
            },
        }
    }
}

#[async_trait]
impl Asker for AcpAsker {
    async fn ask(&self, question: Question) -> Answer {
        if self
            .rejected
            .lock()
            .iter()
            .any(|r| r.covers(&question.tool, &question.arguments))
        {
            return Answer::Reject {
                reason: Some("the user rejected such calls for this session".into()),
            };
        }
        /// Clears the mark also when the question is withdrawn (the future dropped).
        struct Waiting(Option<Arc<Tracker>>, String);
        impl Drop for Waiting {
            fn drop(&mut self) {
                if let Some(t) = &self.0 {
                    t.set_awaiting_permission(&self.1, false);
                }
            }
        }
        let tracker = self.tracker.lock().clone();
        if let Some(t) = &tracker {
            t.set_awaiting_permission(&question.tool_call_id, true);
        }
        let _w = Waiting(tracker, question.tool_call_id.clone());
        self.ask_client(&question).await
    }
}

#[async_trait]
impl Approver for AcpAsker {
    /// The sandbox's escalation: allow once or reject (no rule is offered).
    async fn ask(&self, r: PermissionRequest) -> Decision {
        self.ask_client(&Question::escalation(r)).await.decision()
    }
}

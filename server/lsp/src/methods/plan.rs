//! The plan/todo state of a session (the built-in `todo` and `plan-mode` extensions,
//! [`pi_core::extension::plan`]): `agent/plan/get` reads it for any session (a closed one is
//! resumed from its file), `agent/plan/set` turns plan mode on or off (the client's switch;
//! `/plan` does the same), and the server pushes the `agent/plan` notification on every
//! change. docs/protocol.md#plan-and-todos.

use pi_core::extension::plan::PlanState;
use serde::{Deserialize, Serialize};
use tower_lsp_server::jsonrpc::Result;
use tower_lsp_server::ls_types::notification::Notification;

use crate::ctx::Ctx;
use crate::protocol::SessionParams;

/// `agent/plan` params (server → client) and the result of `agent/plan/get` / `…/set`: the
/// session and its whole plan/todo state (`mode`: `off` | `plan` | `executing`; `todos`:
/// `[{id, text, done, status: pending | in_progress | completed, priority: high | medium |
/// low}]`; `nextId`, `completed`, `total`; `planModeAvailable`: the plan mode switch works).
/// `available`: false when both extensions are off in this workspace (the state is then
/// empty). Its TypeScript declaration comes from a checked mirror (server/lsp/src/wire_ts.rs:
/// pi-core's [`PlanState`] carries no ts-rs derive).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PlanParams {
    pub session_id: String,
    pub available: bool,
    #[serde(flatten)]
    pub state: PlanState,
}

/// The `agent/plan` notification.
#[derive(Debug)]
pub enum PlanNotification {}

impl Notification for PlanNotification {
    type Params = PlanParams;
    const METHOD: &'static str = "agent/plan";
}

/// `agent/plan/set` params: plan mode on or off.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PlanSetParams {
    pub session_id: String,
    pub enabled: bool,
}

/// The wire shape of `session`'s state.
pub(crate) fn plan_params(session: &pi_core::harness::AgentSession) -> PlanParams {
    match session.plan() {
        Some(board) => PlanParams {
            session_id: session.id().to_string(),
            available: true,
            state: board.state(),
        },
        None => PlanParams {
            session_id: session.id().to_string(),
            available: false,
            state: PlanState {
                next_id: 1,
                ..PlanState::default()
            },
        },
    }
}

/// Pushes `state` of session `session_id` as `agent/plan`.
pub(crate) async fn notify(client: &tower_lsp_server::Client, session_id: &str, state: PlanState) {
    client
        .send_notification::<PlanNotification>(PlanParams {
            session_id: session_id.to_string(),
            available: true,
            state,
        })
        .await
}

/// `agent/plan/get {sessionId}` → [`PlanParams`] (the state on the session's active
/// branch).
pub(crate) async fn plan_get(cx: Ctx, p: SessionParams) -> Result<PlanParams> {
    let session = cx.session(&p.session_id).await?;
    Ok(plan_params(&session))
}

/// `agent/plan/set {sessionId, enabled}` → [`PlanParams`] after the switch (written as a
/// `plan-mode` entry; the tools change from the next run). InvalidParams naming
/// `enabled` when the `plan-mode` extension is off in this workspace.
pub(crate) async fn plan_set(cx: Ctx, p: PlanSetParams) -> Result<PlanParams> {
    let session = cx.session(&p.session_id).await?;
    let off = "plan mode is off in this workspace (builtinExtensions \"plan-mode\")";
    let board = session
        .plan()
        .cloned()
        .ok_or_else(|| super::invalid("enabled", off))?;
    board
        .set_plan_mode(p.enabled)
        .await
        .map_err(|e| super::invalid("enabled", e))?;
    Ok(plan_params(&session))
}

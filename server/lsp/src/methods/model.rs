//! `agent/model/*` and `agent/thinking/*` (Pi's `get_available_models`, `set_model`,
//! `cycle_model`, `set_thinking_level`, `cycle_thinking_level`). A run already going keeps
//! its model and level; the next run uses the new ones. Each change is written to the
//! session file (`model_change`, `thinking_level_change`) so a resumed session gets them back.

use pi_ai::models::ThinkingLevel;
use pi_ai::{Model, Registry};
use tower_lsp_server::jsonrpc::Result;

use super::{core_error, model_info};
use crate::ctx::Ctx;
use crate::protocol::{
    agent_error, codes, Direction, ModelCycleParams, ModelListResult, ModelSetParams,
    ModelSetResult, SessionListParams, SessionParams, ThinkingResult, ThinkingSetParams,
};

/// The models that can be used now: those with a key, or of a custom provider (models.json),
/// then the offline scripted model.
pub(crate) fn available_models(ws: &pi_core::resources::WorkspaceConfig) -> Vec<Model> {
    let mut out: Vec<Model> = Registry::load_files(&ws.models_files())
        .usable_models()
        .collect();
    out.push(pi_core::harness::scripted_model());
    out
}

/// `agent/model/list {}` → the usable models.
pub(crate) async fn model_list(cx: Ctx, _: SessionListParams) -> Result<ModelListResult> {
    Ok(ModelListResult {
        models: available_models(&cx.workspace())
            .iter()
            .map(model_info)
            .collect(),
    })
}

/// `agent/model/set {sessionId, model}`; an unknown model changes nothing (-31003).
pub(crate) async fn model_set(cx: Ctx, p: ModelSetParams) -> Result<ModelSetResult> {
    let session = cx.session(&p.session_id).await?;
    session.set_model_by_id(&p.model).map_err(core_error)?;
    Ok(model_set_result(&session.model()))
}

/// `agent/model/cycle {sessionId, direction?}` → the next model (Pi 1.6's `cycleModel`:
/// among settings' `enabledModels` when they name any, else every usable model; the offline
/// demo never), or `null` when there is no other.
pub(crate) async fn model_cycle(cx: Ctx, p: ModelCycleParams) -> Result<Option<ModelSetResult>> {
    let session = cx.session(&p.session_id).await?;
    let backward = matches!(p.direction, Direction::Backward);
    let cycled = session
        .cycle_model(backward)
        .map_err(|e| agent_error(codes::SESSION_IO, e.to_string()))?;
    Ok(cycled.map(|_| model_set_result(&session.model())))
}

/// `agent/thinking/set {sessionId, level}` → the level in effect (clamped to the model).
pub(crate) async fn thinking_set(cx: Ctx, p: ThinkingSetParams) -> Result<ThinkingResult> {
    let session = cx.session(&p.session_id).await?;
    let level = set_level(&session, p.level)?;
    Ok(ThinkingResult { level })
}

/// `agent/thinking/cycle {sessionId}` → the next supported level, or `null` for a model
/// without reasoning.
pub(crate) async fn thinking_cycle(cx: Ctx, p: SessionParams) -> Result<Option<ThinkingResult>> {
    let session = cx.session(&p.session_id).await?;
    let model = session.model();
    let (levels, current) = (
        model.supported_thinking_levels(),
        model.thinking_level.unwrap_or(ThinkingLevel::Off),
    );
    if levels.len() < 2 {
        return Ok(None);
    }
    let next = levels
        .iter()
        .position(|l| *l == current)
        .map(|i| levels[(i + 1) % levels.len()])
        .unwrap_or(levels[0]);
    let level = set_level(&session, next)?;
    Ok(Some(ThinkingResult { level }))
}

/// `agent/model/set`'s answer for the session's model now.
fn model_set_result(m: &Model) -> ModelSetResult {
    ModelSetResult {
        model: model_info(m),
        thinking_level: m.thinking_level.unwrap_or(ThinkingLevel::Off),
    }
}

/// Sets the session's thinking level (clamped), writing `thinking_level_change` when it
/// changes.
fn set_level(
    session: &pi_core::harness::AgentSession,
    level: ThinkingLevel,
) -> Result<ThinkingLevel> {
    session
        .set_thinking_level(level)
        .map_err(|e| agent_error(codes::SESSION_IO, e.to_string()))
}

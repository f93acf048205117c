//! What the editor server and the headless `run` command share: choosing the model (with the
//! offline scripted fallback), the sessions folder, and persisting events as session entries.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use pi_ai::models::{ModelError, SCRIPTED_API};
use pi_ai::{Model, Registry};
use pi_core::session::{SessionError, SessionWriter};
use pi_core::AgentEvent;

/// The offline script replayed when no provider is configured.
const DEMO_SCRIPT: &str = include_str!("../../../fixtures/scripted/demo.json");

/// The line printed (headless) or shown (editor) when the scripted model is used.
pub const SCRIPTED_NOTICE: &str = "pi-lsp: no API key and no models.json found; using the offline scripted model (fixtures/scripted/demo.json).";

/// `<workspace>/.pi/sessions`.
pub fn sessions_dir(workspace: &Path) -> PathBuf {
    workspace.join(".pi").join("sessions")
}

/// The offline scripted model.
pub fn scripted_model() -> Model {
    Model {
        name: "Offline scripted demo".into(),
        max_tokens: 4096,
        script: serde_json::from_str(DEMO_SCRIPT).ok().map(Arc::new),
        ..Model::new(SCRIPTED_API, "scripted", "demo", "")
    }
}

/// Chooses the model as [`Registry::select`] does; falls back to the scripted model (and says
/// so with `Some(notice)`) only when nothing at all is configured and nothing was requested.
pub fn choose_model(
    workspace: &Path,
    requested: Option<&str>,
    init: Option<&str>,
) -> Result<(Model, Option<&'static str>), ModelError> {
    let reg = Registry::load(workspace);
    for w in &reg.warnings {
        tracing::warn!("{w}");
    }
    if requested == Some("scripted/demo") || (requested.is_none() && init == Some("scripted/demo"))
    {
        return Ok((scripted_model(), None));
    }
    match reg.select(requested, init)? {
        Some(mut m) => {
            // settings.json `defaultThinkingLevel`, clamped to what the model supports.
            if let Some(level) = reg
                .settings
                .default_thinking_level
                .as_deref()
                .and_then(pi_ai::models::ThinkingLevel::parse)
            {
                m.thinking_level = Some(m.clamp_thinking_level(level));
            }
            Ok((m, None))
        }
        None if requested.is_none() && init.is_none() => {
            Ok((scripted_model(), Some(SCRIPTED_NOTICE)))
        }
        None => Err(ModelError::NoModel),
    }
}

/// Compaction settings from Pi's settings.json (global, then the project's): `compaction`
/// `{enabled, reserveTokens, keepRecentTokens}`; Pi's defaults otherwise.
pub fn compaction_settings(workspace: &Path) -> pi_core::agent::CompactionSettings {
    let mut c = pi_core::agent::CompactionSettings::default();
    let mut files = Vec::new();
    if let Some(a) = pi_ai::models::agent_dir() {
        files.push(a.join("settings.json"));
    }
    files.push(workspace.join(".pi").join("settings.json"));
    for f in files {
        let Ok(text) = std::fs::read_to_string(&f) else {
            continue;
        };
        let Ok(v) = serde_json::from_str::<serde_json::Value>(&text) else {
            tracing::warn!(
                "{}: not valid JSON; compaction settings ignored",
                f.display()
            );
            continue;
        };
        let s = &v["compaction"];
        if let Some(b) = s["enabled"].as_bool() {
            c.enabled = b;
        }
        if let Some(n) = s["reserveTokens"].as_u64() {
            c.reserve_tokens = n;
        }
        if let Some(n) = s["keepRecentTokens"].as_u64() {
            c.keep_recent_tokens = n;
        }
    }
    c
}

/// Pi's `retry` settings (`enabled`, `maxRetries`, `baseDelayMs`, `maxDelayMs`) from `<agent dir>/settings.json`
/// and `<workspace>/.pi/settings.json` (project over global); defaults where absent.
pub fn retry_settings(workspace: &Path) -> pi_core::agent::RetrySettings {
    let mut r = pi_core::agent::RetrySettings::default();
    let mut files = Vec::new();
    if let Some(a) = pi_ai::models::agent_dir() {
        files.push(a.join("settings.json"));
    }
    files.push(workspace.join(".pi").join("settings.json"));
    for f in files {
        let Ok(text) = std::fs::read_to_string(&f) else {
            continue;
        };
        let Ok(v) = serde_json::from_str::<serde_json::Value>(&text) else {
            tracing::warn!("{}: not valid JSON; retry settings ignored", f.display());
            continue;
        };
        let retry = &v["retry"];
        if let Some(b) = retry["enabled"].as_bool() {
            r.enabled = b;
        }
        if let Some(n) = retry["maxRetries"].as_u64() {
            r.policy.max_retries = n.min(100) as u32;
        }
        if let Some(n) = retry["baseDelayMs"].as_u64() {
            r.policy.base_delay = std::time::Duration::from_millis(n);
        }
        if let Some(n) = retry["maxDelayMs"].as_u64() {
            r.policy.max_delay = std::time::Duration::from_millis(n);
        }
    }
    r
}

/// The thinking level a session records for `model` (Pi writes `off` when none is set).
pub fn thinking_level_name(model: &Model) -> &'static str {
    model.thinking_level.map(|l| l.as_str()).unwrap_or("off")
}

/// Persists a run's events: each completed message becomes a `message` entry as it ends; turn
/// and run ends make the file durable.
pub struct Recorder {
    writer: Arc<Mutex<SessionWriter>>,
}

impl Recorder {
    pub fn new(writer: Arc<Mutex<SessionWriter>>) -> Self {
        Recorder { writer }
    }

    /// Appends an entry of `kind` with `fields` (a delivered custom message or shell output
    /// stored as what it is rather than as a plain user message).
    pub fn record_entry(&self, kind: &str, fields: serde_json::Value) -> Result<(), SessionError> {
        let Ok(mut w) = self.writer.lock() else {
            return Ok(());
        };
        w.append_entry(kind, fields).map(|_| ())
    }

    /// Records `event`; an error means the session is no longer being saved.
    pub fn record(&self, event: &AgentEvent) -> Result<(), SessionError> {
        let Ok(mut w) = self.writer.lock() else {
            return Ok(());
        };
        match event {
            AgentEvent::MessageEnd { message } => w.append_message(message).map(|_| ()),
            AgentEvent::TurnEnd { .. } | AgentEvent::AgentEnd { .. } => w.sync(),
            _ => Ok(()),
        }
    }
}

//! Models, providers and how one is chosen.
//!
//! Built-in providers (`anthropic`, `openai`) take keys from `ANTHROPIC_API_KEY` /
//! `OPENAI_API_KEY`. Custom providers come from Pi-format `models.json` files (Pi 0.73.1
//! `docs/models.md`): `<workspace>/.pi/models.json` first, then `<agent dir>/models.json`, where
//! the agent dir is `$PI_CODING_AGENT_DIR` or `~/.pi/agent`. A provider's `apiKey` is the name of
//! an environment variable when one by that name is set, a shell command when it starts with `!`,
//! else the literal key (resolved in memory only, never written anywhere).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The wire format of the built-in offline scripted model.
pub const SCRIPTED_API: &str = "scripted";

/// Per-million-token prices in US dollars.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ModelCost {
    pub input: f64,
    pub output: f64,
    pub cache_read: f64,
    pub cache_write: f64,
}

/// One model of one provider, with everything a request needs.
#[derive(Debug, Clone)]
pub struct Model {
    /// Model id sent to the provider, e.g. `claude-sonnet-4-5`.
    pub id: String,
    pub name: String,
    /// Wire format: `anthropic-messages`, `openai-completions` or `scripted`.
    pub api: String,
    /// Provider name, e.g. `anthropic` or a models.json key.
    pub provider: String,
    /// Base URL: for Anthropic without `/v1`, for OpenAI-compatible servers with it.
    pub base_url: String,
    /// Resolved key; `None` when the provider needs none or none is configured.
    pub api_key: Option<String>,
    /// Extra request headers.
    pub headers: BTreeMap<String, String>,
    /// Context window, in tokens.
    pub context_window: u64,
    /// Output limit per response, in tokens.
    pub max_tokens: u64,
    /// Whether the model reasons (thinking blocks).
    pub reasoning: bool,
    pub cost: ModelCost,
    /// Pi's OpenAI `compat` flags, kept verbatim.
    pub compat: Value,
    /// For the scripted api: the responses to replay.
    pub script: Option<Arc<crate::api::scripted::Script>>,
}

impl Model {
    /// A model of `provider` speaking `api` at `base_url`, with Pi's models.json defaults:
    /// name = id, no key, 128,000-token window, 16,384 output tokens, no reasoning, zero cost.
    pub fn new(api: &str, provider: &str, id: &str, base_url: &str) -> Model {
        Model {
            id: id.to_string(),
            name: id.to_string(),
            api: api.to_string(),
            provider: provider.to_string(),
            base_url: base_url.to_string(),
            api_key: None,
            headers: BTreeMap::new(),
            context_window: 128_000,
            max_tokens: 16_384,
            reasoning: false,
            cost: ModelCost::default(),
            compat: Value::Null,
            script: None,
        }
    }

    /// `provider/id`.
    pub fn full_id(&self) -> String {
        format!("{}/{}", self.provider, self.id)
    }
}

/// models.json: `{"providers": {"<name>": ProviderConfig}}`.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct ModelsFile {
    #[serde(default)]
    pub providers: serde_json::Map<String, Value>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ProviderConfig {
    base_url: Option<String>,
    api: Option<String>,
    api_key: Option<String>,
    #[serde(default)]
    headers: BTreeMap<String, String>,
    #[serde(default)]
    compat: Option<Value>,
    #[serde(default)]
    models: Vec<ModelConfig>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ModelConfig {
    id: String,
    name: Option<String>,
    api: Option<String>,
    context_window: Option<u64>,
    max_tokens: Option<u64>,
    #[serde(default)]
    reasoning: bool,
    #[serde(default)]
    cost: ModelCost,
    #[serde(default)]
    headers: BTreeMap<String, String>,
    compat: Option<Value>,
}

/// The subset of Pi's `settings.json` used here.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Settings {
    pub default_provider: Option<String>,
    pub default_model: Option<String>,
    pub default_thinking_level: Option<String>,
}

/// Errors found while loading configuration or choosing a model.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    #[error("cannot read {path}: {message}")]
    Config { path: PathBuf, message: String },
    #[error("unknown model \"{0}\" (expected provider/id of a configured provider)")]
    UnknownModel(String),
    #[error("no model available: set ANTHROPIC_API_KEY or OPENAI_API_KEY, or add a provider to models.json")]
    NoModel,
}

/// Pi's agent directory: `$PI_CODING_AGENT_DIR`, else `~/.pi/agent`.
pub fn agent_dir() -> Option<PathBuf> {
    if let Some(d) = std::env::var_os("PI_CODING_AGENT_DIR").filter(|d| !d.is_empty()) {
        return Some(PathBuf::from(d));
    }
    std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".pi").join("agent"))
}

/// Resolves a models.json `apiKey`: `!command` runs the command, a set environment variable
/// name gives its value, anything else is the literal key.
pub fn resolve_api_key(spec: &str) -> Option<String> {
    if let Some(cmd) = spec.strip_prefix('!') {
        let out = std::process::Command::new("sh")
            .arg("-c")
            .arg(cmd)
            .stdin(std::process::Stdio::null())
            .output()
            .ok()?;
        let key = String::from_utf8_lossy(&out.stdout).trim().to_string();
        return (!key.is_empty()).then_some(key);
    }
    if let Ok(v) = std::env::var(spec) {
        if !v.is_empty() {
            return Some(v);
        }
    }
    Some(spec.to_string())
}

fn read_json<T: for<'de> Deserialize<'de> + Default>(path: &Path) -> Result<T, ModelError> {
    match std::fs::read_to_string(path) {
        Ok(text) => serde_json::from_str(&text).map_err(|e| ModelError::Config {
            path: path.to_path_buf(),
            message: e.to_string(),
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(T::default()),
        Err(e) => Err(ModelError::Config {
            path: path.to_path_buf(),
            message: e.to_string(),
        }),
    }
}

/// All known models, in preference order: models.json providers (workspace file first, then the
/// agent dir's, in file order), then built-in providers.
#[derive(Debug, Clone, Default)]
pub struct Registry {
    pub models: Vec<Model>,
    /// Merged settings (project over global).
    pub settings: Settings,
    /// True when any models.json provider was loaded.
    pub has_custom: bool,
    /// Problems met while loading, for the user to see (a broken file is skipped, not fatal).
    pub warnings: Vec<String>,
}

fn builtin(
    provider: &str,
    api: &str,
    base: &str,
    key: Option<String>,
    ids: &[(&str, u64, u64)],
) -> Vec<Model> {
    ids.iter()
        .map(|(id, window, max)| Model {
            api_key: key.clone(),
            context_window: *window,
            max_tokens: *max,
            ..Model::new(api, provider, id, base)
        })
        .collect()
}

impl Registry {
    /// Loads models.json and settings.json for `workspace` (either may be absent).
    pub fn load(workspace: &Path) -> Registry {
        let mut reg = Registry::default();
        let agent = agent_dir();
        let mut files = vec![workspace.join(".pi").join("models.json")];
        if let Some(a) = &agent {
            files.push(a.join("models.json"));
        }
        let mut seen = std::collections::HashSet::new();
        for f in files {
            match read_json::<ModelsFile>(&f) {
                Ok(mf) => {
                    for (name, cfg) in mf.providers {
                        if !seen.insert(name.clone()) {
                            continue;
                        }
                        match serde_json::from_value::<ProviderConfig>(cfg) {
                            Ok(p) => reg.add_provider(&name, p),
                            Err(e) => reg
                                .warnings
                                .push(format!("{}: provider {name}: {e}", f.display())),
                        }
                    }
                }
                Err(e) => reg.warnings.push(e.to_string()),
            }
        }
        reg.has_custom = !reg.models.is_empty();
        let anthropic_key = std::env::var("ANTHROPIC_API_KEY")
            .ok()
            .filter(|k| !k.is_empty());
        let openai_key = std::env::var("OPENAI_API_KEY")
            .ok()
            .filter(|k| !k.is_empty());
        if !seen.contains("anthropic") {
            reg.models.extend(builtin(
                "anthropic",
                "anthropic-messages",
                "https://api.anthropic.com",
                anthropic_key,
                &[
                    ("claude-sonnet-4-5", 200_000, 64_000),
                    ("claude-opus-4-1", 200_000, 32_000),
                    ("claude-haiku-4-5", 200_000, 64_000),
                ],
            ));
        }
        if !seen.contains("openai") {
            reg.models.extend(builtin(
                "openai",
                "openai-completions",
                "https://api.openai.com/v1",
                openai_key,
                &[
                    ("gpt-4.1", 1_047_576, 32_768),
                    ("gpt-4o-mini", 128_000, 16_384),
                ],
            ));
        }
        let mut settings = Settings::default();
        let mut setting_files = Vec::new();
        if let Some(a) = &agent {
            setting_files.push(a.join("settings.json"));
        }
        setting_files.push(workspace.join(".pi").join("settings.json"));
        for f in setting_files {
            match read_json::<Settings>(&f) {
                Ok(s) => {
                    settings.default_provider = s.default_provider.or(settings.default_provider);
                    settings.default_model = s.default_model.or(settings.default_model);
                    settings.default_thinking_level =
                        s.default_thinking_level.or(settings.default_thinking_level);
                }
                Err(e) => reg.warnings.push(e.to_string()),
            }
        }
        reg.settings = settings;
        reg
    }

    fn add_provider(&mut self, name: &str, p: ProviderConfig) {
        let key = p.api_key.as_deref().and_then(resolve_api_key);
        for m in p.models {
            let mut headers = p.headers.clone();
            headers.extend(m.headers);
            self.models.push(Model {
                name: m.name.unwrap_or_else(|| m.id.clone()),
                id: m.id,
                api: m
                    .api
                    .or_else(|| p.api.clone())
                    .unwrap_or_else(|| "openai-completions".into()),
                provider: name.to_string(),
                base_url: p.base_url.clone().unwrap_or_default(),
                api_key: key.clone(),
                headers,
                context_window: m.context_window.unwrap_or(128_000),
                max_tokens: m.max_tokens.unwrap_or(16_384),
                reasoning: m.reasoning,
                cost: m.cost,
                compat: m.compat.or_else(|| p.compat.clone()).unwrap_or(Value::Null),
                script: None,
            });
        }
    }

    /// Finds `provider/id` (the id may itself contain `/`).
    pub fn find(&self, full: &str) -> Option<&Model> {
        let (provider, id) = full.split_once('/')?;
        self.models
            .iter()
            .find(|m| m.provider == provider && m.id == id)
    }

    fn usable(m: &Model) -> bool {
        m.api_key.is_some() || m.provider != "anthropic" && m.provider != "openai"
    }

    /// Chooses the model: `requested` (`provider/id`, from the prompt), then `init` (the
    /// client's initializationOptions), then settings' `defaultProvider` / `defaultModel`, then
    /// the first provider with a key. `Ok(None)` means nothing is configured at all (the caller
    /// may fall back to the offline scripted model).
    pub fn select(
        &self,
        requested: Option<&str>,
        init: Option<&str>,
    ) -> Result<Option<Model>, ModelError> {
        if let Some(choice) = requested.or(init) {
            return self
                .find(choice)
                .cloned()
                .map(Some)
                .ok_or_else(|| ModelError::UnknownModel(choice.to_string()));
        }
        if let (Some(p), Some(id)) = (
            &self.settings.default_provider,
            &self.settings.default_model,
        ) {
            if let Some(m) = self.find(&format!("{p}/{id}")) {
                return Ok(Some(m.clone()));
            }
        }
        if let Some(p) = &self.settings.default_provider {
            if let Some(m) = self
                .models
                .iter()
                .find(|m| &m.provider == p && Self::usable(m))
            {
                return Ok(Some(m.clone()));
            }
        }
        Ok(self.models.iter().find(|m| Self::usable(m)).cloned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literal_and_env_keys() {
        assert_eq!(resolve_api_key("sk-literal").as_deref(), Some("sk-literal"));
        assert_eq!(
            resolve_api_key("!echo from-cmd").as_deref(),
            Some("from-cmd")
        );
        assert_eq!(resolve_api_key("PATH"), std::env::var("PATH").ok());
    }

    #[test]
    fn workspace_models_json_wins_and_is_selected_first() {
        let dir = std::env::temp_dir().join(format!("pi-ai-models-{}", std::process::id()));
        std::fs::create_dir_all(dir.join(".pi")).unwrap();
        std::fs::write(
            dir.join(".pi/models.json"),
            r#"{"providers":{"local":{"baseUrl":"http://127.0.0.1:1/v1","api":"openai-completions","apiKey":"x",
               "models":[{"id":"m1","contextWindow":1000,"maxTokens":100}]},
               "ant":{"baseUrl":"http://127.0.0.1:2","api":"anthropic-messages","apiKey":"y","models":[{"id":"c"}]}}}"#,
        )
        .unwrap();
        let reg = Registry::load(&dir);
        let m = reg.select(None, None).unwrap().unwrap();
        assert_eq!(
            (m.full_id().as_str(), m.context_window, m.max_tokens),
            ("local/m1", 1000, 100)
        );
        let c = reg
            .select(Some("ant/c"), Some("local/m1"))
            .unwrap()
            .unwrap();
        assert_eq!(
            (c.api.as_str(), c.api_key.as_deref()),
            ("anthropic-messages", Some("y"))
        );
        assert!(matches!(
            reg.select(Some("nope/x"), None),
            Err(ModelError::UnknownModel(_))
        ));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

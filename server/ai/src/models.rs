//! Models, providers and how one is chosen.
//!
//! Settings are not read here: the caller passes the default model as [`ModelDefaults`] and
//! chooses which models.json files count ([`Registry::load_files`]; an untrusted workspace's
//! `.pi/models.json` is left out).
//!
//! Built-in providers `anthropic` and `openai` carry Pi 1.6.0's catalogue (`catalogue.json`:
//! context window, output limit, reasoning, input kinds, per-million prices, thinking-level
//! map and `compat` flags, for the chat models of pi-ai's `providers/data/anthropic.json`
//! and `openai.json`), with Pi 1.6's default model first. Their
//! keys come from Pi's variables ([`api_key_env_vars`]: `ANTHROPIC_OAUTH_TOKEN` then
//! `ANTHROPIC_API_KEY`; `OPENAI_API_KEY`). Custom providers come from Pi-format `models.json`
//! files (Pi `docs/models.md`): `<workspace>/.pi/models.json` first, then
//! `<agent dir>/models.json`, where the agent dir is `$PI_CODING_AGENT_DIR` or `~/.pi/agent`. A
//! models.json entry named like a built-in provider merges into it as in Pi: its `baseUrl`,
//! `apiKey`, `headers` and `compat` apply to the built-in models (`compat` key by key over their
//! own, as every `compat` layer merges), `modelOverrides` change single
//! models (partial `cost` too), and its `models` are upserted by id. A provider's `apiKey` is
//! the name of an environment variable when one by that name is set, a shell command when it
//! starts with `!`, else the literal key (resolved in memory only, never written anywhere).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::types::{Cost, Usage};

/// A model's wire format (Pi's `api`), written in models.json, on the wire and in assistant
/// messages as the same strings Pi uses: `anthropic-messages`, `openai-completions`,
/// `openai-responses`, and this crate's offline `scripted`. Parsing any other string fails with
/// [`UnknownApi`] (in models.json: the provider is skipped with a warning naming the string).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
pub enum Api {
    /// Anthropic's Messages API (`/v1/messages`).
    #[serde(rename = "anthropic-messages")]
    AnthropicMessages,
    /// OpenAI's Chat Completions API and the servers compatible with it.
    #[serde(rename = "openai-completions")]
    OpenaiCompletions,
    /// OpenAI's Responses API.
    #[serde(rename = "openai-responses")]
    OpenaiResponses,
    /// The offline scripted model (replays [`crate::script::Script`]).
    #[serde(rename = "scripted")]
    Scripted,
}

impl Api {
    /// Every api, in the order error messages list them.
    pub const ALL: [Api; 4] = [
        Api::AnthropicMessages,
        Api::OpenaiCompletions,
        Api::OpenaiResponses,
        Api::Scripted,
    ];

    /// The string Pi writes for this api.
    pub fn as_str(self) -> &'static str {
        match self {
            Api::AnthropicMessages => "anthropic-messages",
            Api::OpenaiCompletions => "openai-completions",
            Api::OpenaiResponses => "openai-responses",
            Api::Scripted => "scripted",
        }
    }
}

impl std::fmt::Display for Api {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An api string this crate has no adapter for.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown api \"{0}\" (known: anthropic-messages, openai-completions, openai-responses, scripted)")]
pub struct UnknownApi(pub String);

impl std::str::FromStr for Api {
    type Err = UnknownApi;

    fn from_str(s: &str) -> Result<Api, UnknownApi> {
        Api::ALL
            .into_iter()
            .find(|a| a.as_str() == s)
            .ok_or_else(|| UnknownApi(s.to_string()))
    }
}

impl PartialEq<Api> for String {
    fn eq(&self, api: &Api) -> bool {
        self == api.as_str()
    }
}

/// The wire format of the built-in offline scripted model.
pub const SCRIPTED_API: Api = Api::Scripted;

/// Token budgets for budget-based thinking per level (Pi 1.6 settings `thinkingBudgets`:
/// `{minimal, low, medium, high}`, each in tokens). A level left `None` takes Pi's default
/// (pi-ai `DEFAULT_THINKING_BUDGETS` in `api/simple-options.js`: 1,024 / 2,048 / 8,192 /
/// 16,384); `xhigh` and `max` use `high`'s (Pi's `clampReasoning`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ThinkingBudgets {
    pub minimal: Option<u64>,
    pub low: Option<u64>,
    pub medium: Option<u64>,
    pub high: Option<u64>,
}

impl ThinkingBudgets {
    /// The budget of `level` in tokens (Pi's `thinkingBudgetForLevel`: the defaults overridden
    /// by the set levels); 0 for `off`.
    pub fn for_level(&self, level: ThinkingLevel) -> u64 {
        match level {
            ThinkingLevel::Off => 0,
            ThinkingLevel::Minimal => self.minimal.unwrap_or(1_024),
            ThinkingLevel::Low => self.low.unwrap_or(2_048),
            ThinkingLevel::Medium => self.medium.unwrap_or(8_192),
            ThinkingLevel::High | ThinkingLevel::Xhigh | ThinkingLevel::Max => {
                self.high.unwrap_or(16_384)
            }
        }
    }
}

/// Per-million-token prices in US dollars.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
#[serde(rename_all = "camelCase", default)]
pub struct ModelCost {
    pub input: f64,
    pub output: f64,
    pub cache_read: f64,
    pub cache_write: f64,
    /// models.json `cost.tiers` (Pi 1.6: "Request-wide pricing tiers. The highest matching
    /// input threshold applies to the full request"): see [`calculate_cost`]. Empty: none
    /// (not written then).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    #[cfg_attr(feature = "ts", ts(skip))]
    pub tiers: Vec<CostTier>,
}

/// One pricing tier of [`ModelCost::tiers`]: the rates (US dollars per million tokens) of a
/// request whose input (`input + cacheRead + cacheWrite` tokens) is above `inputTokensAbove`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct CostTier {
    pub input_tokens_above: u64,
    pub input: f64,
    pub output: f64,
    pub cache_read: f64,
    pub cache_write: f64,
}

/// Pi's thinking levels (`off`, `minimal`, `low`, `medium`, `high`, `xhigh`, and Pi 1.6's
/// opt-in `max`), in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
#[serde(rename_all = "lowercase")]
pub enum ThinkingLevel {
    Off,
    Minimal,
    Low,
    Medium,
    High,
    Xhigh,
    /// Pi 1.6's level above `xhigh`, offered only where the model's `thinkingLevelMap` names it.
    Max,
}

impl ThinkingLevel {
    /// All levels, lowest first.
    pub const ALL: [ThinkingLevel; 7] = [
        ThinkingLevel::Off,
        ThinkingLevel::Minimal,
        ThinkingLevel::Low,
        ThinkingLevel::Medium,
        ThinkingLevel::High,
        ThinkingLevel::Xhigh,
        ThinkingLevel::Max,
    ];

    /// The level's name as Pi writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            ThinkingLevel::Off => "off",
            ThinkingLevel::Minimal => "minimal",
            ThinkingLevel::Low => "low",
            ThinkingLevel::Medium => "medium",
            ThinkingLevel::High => "high",
            ThinkingLevel::Xhigh => "xhigh",
            ThinkingLevel::Max => "max",
        }
    }

    /// Parses Pi's name of a level.
    pub fn parse(s: &str) -> Option<ThinkingLevel> {
        ThinkingLevel::ALL.into_iter().find(|l| l.as_str() == s)
    }
}

/// The cost of `usage` at `rates` (US dollars per million tokens), as Pi 1.6's
/// `calculateCost` (pi-ai `dist/models.js`): the highest of `rates.tiers` whose
/// `inputTokensAbove` the request's input tokens exceed prices all of it; one-hour cache writes (`cacheWrite1h`) at twice
/// the input rate, the rest of the cache writes at the cache-write rate; `totalFromProvider`
/// false (the total is computed here, not billed by the provider).
pub fn calculate_cost(rates: &ModelCost, usage: &Usage) -> Cost {
    // Pi 1.6: the tier with the highest `inputTokensAbove` below the request's input
    // (`input + cacheRead + cacheWrite`) prices the whole request; none: the base rates.
    let input_tokens = usage.input + usage.cache_read + usage.cache_write;
    let (r_input, r_output, r_cache_read, r_cache_write) = rates
        .tiers
        .iter()
        .filter(|t| input_tokens > t.input_tokens_above)
        .max_by_key(|t| t.input_tokens_above)
        .map_or(
            (
                rates.input,
                rates.output,
                rates.cache_read,
                rates.cache_write,
            ),
            |t| (t.input, t.output, t.cache_read, t.cache_write),
        );
    let per = |rate: f64, tokens: u64| rate / 1_000_000.0 * tokens as f64;
    let input = per(r_input, usage.input);
    let output = per(r_output, usage.output);
    let cache_read = per(r_cache_read, usage.cache_read);
    let long_write = usage.cache_write_1h.unwrap_or(0);
    let short_write = usage.cache_write.saturating_sub(long_write);
    // Pi 1.6's arithmetic whatever the lifetimes (not `per`'s: the bits differ).
    let cache_write =
        (r_cache_write * short_write as f64 + r_input * 2.0 * long_write as f64) / 1_000_000.0;
    Cost {
        input,
        output,
        cache_read,
        cache_write,
        total: input + output + cache_read + cache_write,
        total_from_provider: Some(false),
    }
}

/// Pi 1.6's `isOpenRouterModel`: the provider is `openrouter` or the base URL is OpenRouter's.
pub fn is_openrouter(model: &Model) -> bool {
    model.provider == "openrouter" || model.base_url.contains("openrouter.ai")
}

/// Pi 1.6's `applyOpenRouterReportedCost` (pi-ai `dist/utils/openrouter-cost.js`): the usage's
/// total replaced by what OpenRouter reports it billed, when the report is complete and valid
/// (`cost` a finite number ≥ 0; for a bring-your-own-key request also the upstream cost, from
/// `cost_details.upstream_inference_cost`, else its prompt and completion parts), and
/// `totalFromProvider` set to true. `reported` is the stream's `usage` object. Nothing changes
/// otherwise.
pub fn apply_openrouter_reported_cost(cost: &mut Cost, reported: &serde_json::Value) {
    let valid = |v: &serde_json::Value| v.as_f64().filter(|c| c.is_finite() && *c >= 0.0);
    let Some(billed) = valid(&reported["cost"]) else {
        return;
    };
    match reported["is_byok"].as_bool() {
        Some(false) => {
            cost.total = billed;
            cost.total_from_provider = Some(true);
        }
        Some(true) => {
            let details = &reported["cost_details"];
            if !details.is_object() {
                return;
            }
            // `null` (not absent) says the parts are given instead.
            let upstream = match details.get("upstream_inference_cost") {
                None => return,
                Some(serde_json::Value::Null) => match (
                    valid(&details["upstream_inference_prompt_cost"]),
                    valid(&details["upstream_inference_completions_cost"]),
                ) {
                    (Some(p), Some(c)) => p + c,
                    _ => return,
                },
                Some(v) => match valid(v) {
                    Some(u) => u,
                    None => return,
                },
            };
            cost.total = billed + upstream;
            cost.total_from_provider = Some(true);
        }
        None => {}
    }
}

/// One model of one provider, with everything a request needs. Its `Debug` shows no secret:
/// the key and the header values are printed as `<redacted>`.
#[derive(Clone)]
pub struct Model {
    /// Model id sent to the provider, e.g. `claude-sonnet-4-5`.
    pub id: String,
    pub name: String,
    /// Wire format.
    pub api: Api,
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
    /// Input kinds the model accepts: `text`, `image`.
    pub input: Vec<String>,
    /// Per-million-token prices.
    pub cost: ModelCost,
    /// Pi's `thinkingLevelMap` (level → provider value; `null` = unsupported), kept verbatim.
    pub thinking_level_map: Option<Value>,
    /// The thinking level requests with this model ask for (Pi's `reasoning` stream option;
    /// the caller sets it from the session or `defaultThinkingLevel`). `None` sends nothing and
    /// leaves the provider's default; ignored for models without `reasoning`.
    pub thinking_level: Option<ThinkingLevel>,
    /// The budgets budget-based thinking asks for per level (settings `thinkingBudgets`; the
    /// caller sets them, as it sets `thinking_level`). Default: Pi's.
    pub thinking_budgets: ThinkingBudgets,
    /// models.json `samplingParams`: free-form fields merged into every `openai-completions`
    /// / `openai-responses` request body (Pi 1.6 `docs/models.md`). `None`: none.
    pub sampling_params: Option<Map<String, Value>>,
    /// models.json `samplingParamsByThinkingLevel` (`{level: {field: value}}`, Pi's level
    /// names): the effective level's entry merged over [`Model::sampling_params`].
    pub sampling_params_by_thinking_level: Option<Map<String, Value>>,
    /// Pi's OpenAI `compat` flags, kept verbatim.
    pub compat: Value,
    /// For the scripted api: the responses to replay.
    pub script: Option<Arc<crate::script::Script>>,
}

impl std::fmt::Debug for Model {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let hidden = "<redacted>";
        let headers: BTreeMap<&str, &str> =
            self.headers.keys().map(|k| (k.as_str(), hidden)).collect();
        f.debug_struct("Model")
            .field("id", &self.id)
            .field("name", &self.name)
            .field("api", &self.api)
            .field("provider", &self.provider)
            .field("base_url", &self.base_url)
            .field("api_key", &self.api_key.as_ref().map(|_| hidden))
            .field("headers", &headers)
            .field("context_window", &self.context_window)
            .field("max_tokens", &self.max_tokens)
            .field("reasoning", &self.reasoning)
            .field("input", &self.input)
            .field("cost", &self.cost)
            .field("thinking_level_map", &self.thinking_level_map)
            .field("thinking_level", &self.thinking_level)
            .field("thinking_budgets", &self.thinking_budgets)
            .field("sampling_params", &self.sampling_params)
            .field(
                "sampling_params_by_thinking_level",
                &self.sampling_params_by_thinking_level,
            )
            .field("compat", &self.compat)
            .field("script", &self.script.as_ref().map(|_| "…"))
            .finish()
    }
}

impl Model {
    /// A model of `provider` speaking `api` at `base_url`, with Pi's models.json defaults:
    /// name = id, no key, 128,000-token window, 16,384 output tokens, no reasoning, zero cost.
    pub fn new(api: Api, provider: &str, id: &str, base_url: &str) -> Model {
        Model {
            id: id.to_string(),
            name: id.to_string(),
            api,
            provider: provider.to_string(),
            base_url: base_url.to_string(),
            api_key: None,
            headers: BTreeMap::new(),
            context_window: 128_000,
            max_tokens: 16_384,
            reasoning: false,
            input: vec!["text".to_string()],
            cost: ModelCost::default(),
            thinking_level_map: None,
            thinking_level: None,
            thinking_budgets: ThinkingBudgets::default(),
            sampling_params: None,
            sampling_params_by_thinking_level: None,
            compat: Value::Null,
            script: None,
        }
    }

    /// Whether the model takes system messages after the conversation has started: its
    /// `compat.supportsMidConvoSystemMessages` (the built-in catalogue sets it as Pi 1.6's
    /// does; models.json's provider `compat`, a model's own and `modelOverrides` change it);
    /// `false` when absent or not a boolean (Pi's default). With it a request carries later
    /// prompt patches at their place ([`crate::Message::System`]); without it the current
    /// prompt leads the request alone (pi-ai `resolveTranscript`).
    pub fn supports_mid_convo_system_messages(&self) -> bool {
        self.compat
            .get("supportsMidConvoSystemMessages")
            .and_then(Value::as_bool)
            .unwrap_or(false)
    }

    /// The fields Pi 1.6's `resolveSamplingParams` merges last into an `openai-completions` /
    /// `openai-responses` request body (over the fields named before it): [`Model::sampling_params`],
    /// then the entry of [`Model::sampling_params_by_thinking_level`] for the request's
    /// effective level (the model's `thinking_level` clamped, `off` when none), key by key.
    /// Nothing when the model has neither.
    pub fn apply_sampling_params(&self, body: &mut Value) {
        if self.sampling_params.is_none() && self.sampling_params_by_thinking_level.is_none() {
            return;
        }
        let level = self.clamp_thinking_level(self.thinking_level.unwrap_or(ThinkingLevel::Off));
        let by_level = self
            .sampling_params_by_thinking_level
            .as_ref()
            .and_then(|m| m.get(level.as_str()))
            .and_then(Value::as_object);
        let Some(body) = body.as_object_mut() else {
            return;
        };
        for params in [self.sampling_params.as_ref(), by_level]
            .into_iter()
            .flatten()
        {
            for (k, v) in params {
                body.insert(k.clone(), v.clone());
            }
        }
    }

    /// The levels this model supports (Pi's `getSupportedThinkingLevels`): only `off` without
    /// reasoning; a level mapped to `null` in `thinkingLevelMap` is unsupported; `xhigh` and
    /// `max` only when the map names them.
    pub fn supported_thinking_levels(&self) -> Vec<ThinkingLevel> {
        if !self.reasoning {
            return vec![ThinkingLevel::Off];
        }
        ThinkingLevel::ALL
            .into_iter()
            .filter(|l| {
                let mapped = self
                    .thinking_level_map
                    .as_ref()
                    .and_then(|m| m.get(l.as_str()));
                match (l, mapped) {
                    (_, Some(Value::Null)) => false,
                    (ThinkingLevel::Xhigh | ThinkingLevel::Max, m) => m.is_some(),
                    _ => true,
                }
            })
            .collect()
    }

    /// `level` clamped to a supported one (Pi's `clampThinkingLevel`: the nearest supported
    /// level upwards, else downwards).
    pub fn clamp_thinking_level(&self, level: ThinkingLevel) -> ThinkingLevel {
        let ok = self.supported_thinking_levels();
        if ok.contains(&level) {
            return level;
        }
        ThinkingLevel::ALL
            .into_iter()
            .filter(|l| *l > level)
            .find(|l| ok.contains(l))
            .or_else(|| {
                ThinkingLevel::ALL
                    .into_iter()
                    .rev()
                    .filter(|l| *l < level)
                    .find(|l| ok.contains(l))
            })
            .unwrap_or(ThinkingLevel::Off)
    }

    /// The provider value `thinkingLevelMap` gives `level`, when it is a string.
    pub fn mapped_thinking_value(&self, level: ThinkingLevel) -> Option<String> {
        self.thinking_level_map
            .as_ref()?
            .get(level.as_str())?
            .as_str()
            .map(str::to_string)
    }

    /// Pi 1.6's default output limit of a request: the model's `maxTokens` whole (Pi 1.6.0
    /// sends a 64,000-token model's 64,000; 0.73.1 capped it at 32,000), 32,000 tokens for a
    /// model that names none.
    pub fn default_max_tokens(&self) -> u64 {
        if self.max_tokens > 0 {
            self.max_tokens
        } else {
            32_000
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
    api: Option<Api>,
    api_key: Option<String>,
    #[serde(default)]
    headers: BTreeMap<String, String>,
    #[serde(default)]
    compat: Option<Value>,
    #[serde(default)]
    models: Vec<ModelConfig>,
    /// Per-model overrides of built-in models (Pi `docs/models.md` "Per-model Overrides").
    #[serde(default)]
    model_overrides: BTreeMap<String, ModelOverride>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ModelConfig {
    id: String,
    name: Option<String>,
    api: Option<Api>,
    context_window: Option<u64>,
    max_tokens: Option<u64>,
    #[serde(default)]
    reasoning: bool,
    input: Option<Vec<String>>,
    #[serde(default)]
    cost: ModelCost,
    #[serde(default)]
    headers: BTreeMap<String, String>,
    compat: Option<Value>,
    thinking_level_map: Option<Value>,
    sampling_params: Option<Map<String, Value>>,
    sampling_params_by_thinking_level: Option<Map<String, Value>>,
}

/// One `modelOverrides` entry: every field optional, `cost` partial.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ModelOverride {
    name: Option<String>,
    reasoning: Option<bool>,
    input: Option<Vec<String>>,
    cost: Option<PartialCost>,
    context_window: Option<u64>,
    max_tokens: Option<u64>,
    #[serde(default)]
    headers: BTreeMap<String, String>,
    compat: Option<Value>,
    sampling_params: Option<Map<String, Value>>,
    sampling_params_by_thinking_level: Option<Map<String, Value>>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct PartialCost {
    input: Option<f64>,
    output: Option<f64>,
    cache_read: Option<f64>,
    cache_write: Option<f64>,
    tiers: Option<Vec<CostTier>>,
}

impl ModelOverride {
    fn apply(self, m: &mut Model) {
        if let Some(v) = self.name {
            m.name = v;
        }
        if let Some(v) = self.reasoning {
            m.reasoning = v;
        }
        if let Some(v) = self.input {
            m.input = v;
        }
        if let Some(c) = self.cost {
            m.cost.input = c.input.unwrap_or(m.cost.input);
            m.cost.output = c.output.unwrap_or(m.cost.output);
            m.cost.cache_read = c.cache_read.unwrap_or(m.cost.cache_read);
            m.cost.cache_write = c.cache_write.unwrap_or(m.cost.cache_write);
            if let Some(t) = c.tiers {
                m.cost.tiers = t;
            }
        }
        if let Some(v) = self.context_window {
            m.context_window = v;
        }
        if let Some(v) = self.max_tokens {
            m.max_tokens = v;
        }
        m.headers.extend(self.headers);
        if let Some(v) = self.compat {
            // Pi 1.6 (provider-composer `mergeCompat`): key by key over the model's own.
            merge_compat(&mut m.compat, &v);
        }
        // Pi 1.6's provider-composer: `samplingParams` key by key over the model's, each
        // level's entry of `samplingParamsByThinkingLevel` key by key over the model's entry.
        if let Some(v) = self.sampling_params {
            m.sampling_params.get_or_insert_with(Map::new).extend(v);
        }
        if let Some(levels) = self.sampling_params_by_thinking_level {
            let mine = m
                .sampling_params_by_thinking_level
                .get_or_insert_with(Map::new);
            for (level, params) in levels {
                match (mine.get_mut(&level).and_then(Value::as_object_mut), params) {
                    (Some(base), Value::Object(over)) => base.extend(over),
                    (_, params) => {
                        mine.insert(level, params);
                    }
                }
            }
        }
    }
}

/// `provider` (models.json's `compat` of a provider, a custom model or a `modelOverrides`
/// entry) over `model`'s flags, key by key (a non-object replaces them), as Pi 1.6's
/// `mergeCompat` (pi-coding-agent `core/provider-composer.js`): the objects under
/// `openRouterRouting`, `vercelGatewayRouting`, `chatTemplateKwargs` and `chatTemplateArgs`
/// merged key by key too when either side holds one there.
fn merge_compat(model: &mut Value, provider: &Value) {
    const NESTED: [&str; 4] = [
        "openRouterRouting",
        "vercelGatewayRouting",
        "chatTemplateKwargs",
        "chatTemplateArgs",
    ];
    match (model.as_object_mut(), provider.as_object()) {
        (Some(m), Some(p)) => {
            for (k, v) in p {
                let nested = NESTED.contains(&k.as_str())
                    && (v.is_object() || m.get(k).is_some_and(Value::is_object));
                if nested {
                    // `{...base, ...override}`: a side that is no object adds nothing.
                    let mut merged = m
                        .get(k)
                        .and_then(Value::as_object)
                        .cloned()
                        .unwrap_or_default();
                    if let Some(o) = v.as_object() {
                        merged.extend(o.iter().map(|(k, v)| (k.clone(), v.clone())));
                    }
                    m.insert(k.clone(), Value::Object(merged));
                } else {
                    m.insert(k.clone(), v.clone());
                }
            }
        }
        _ => *model = provider.clone(),
    }
}

/// One model of the built-in catalogue (`catalogue.json`: the chat models of Pi 1.6.0's
/// pi-ai `providers/data/anthropic.json` (`anthropic-messages`) and `openai.json`
/// (`openai-responses`), same ids and values; fallback-model lists left out).
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
struct CatalogueEntry {
    id: String,
    name: String,
    reasoning: bool,
    input: Vec<String>,
    cost: ModelCost,
    context_window: u64,
    max_tokens: u64,
    thinking_level_map: Option<Value>,
    /// Pi's `compat` flags (`forceAdaptiveThinking`, `supportsMidConvoSystemMessages`, …).
    #[serde(default)]
    compat: Value,
}

/// A built-in provider: name, wire format, base URL, Pi's default model, key variables.
struct BuiltinProvider {
    name: &'static str,
    api: Api,
    base_url: &'static str,
    default_model: &'static str,
}

/// Built-in providers. Pi talks to OpenAI through its Responses API; this crate's
/// `openai-responses` adapter is new and checked only against recorded streams, so the OpenAI
/// catalogue keeps `openai-completions` (an `"api"` in models.json's `openai` entry switches).
const BUILTIN_PROVIDERS: &[BuiltinProvider] = &[
    BuiltinProvider {
        name: "anthropic",
        api: Api::AnthropicMessages,
        base_url: "https://api.anthropic.com",
        default_model: "claude-opus-5-5",
    },
    BuiltinProvider {
        name: "openai",
        api: Api::OpenaiCompletions,
        base_url: "https://api.openai.com/v1",
        default_model: "gpt-6.2-sol",
    },
];

/// Environment variables holding a provider's key, in precedence order (Pi's
/// `env-api-keys.js`: `ANTHROPIC_OAUTH_TOKEN` before `ANTHROPIC_API_KEY`).
pub fn api_key_env_vars(provider: &str) -> &'static [&'static str] {
    match provider {
        "anthropic" => &["ANTHROPIC_OAUTH_TOKEN", "ANTHROPIC_API_KEY"],
        "openai" => &["OPENAI_API_KEY"],
        "deepseek" => &["DEEPSEEK_API_KEY"],
        "groq" => &["GROQ_API_KEY"],
        "cerebras" => &["CEREBRAS_API_KEY"],
        "xai" => &["XAI_API_KEY"],
        "openrouter" => &["OPENROUTER_API_KEY"],
        "zai" => &["ZAI_API_KEY"],
        "mistral" => &["MISTRAL_API_KEY"],
        "fireworks" => &["FIREWORKS_API_KEY"],
        "huggingface" => &["HF_TOKEN"],
        _ => &[],
    }
}

/// The first non-empty key among [`api_key_env_vars`] of `provider`.
pub fn env_api_key(provider: &str) -> Option<String> {
    api_key_env_vars(provider)
        .iter()
        .find_map(|v| std::env::var(v).ok().filter(|k| !k.is_empty()))
        .inspect(|k| crate::keys::register_secret(k))
}

/// `catalogue.json` parsed once per process: provider name → its entries in Pi's order.
/// Every [`Registry::load_files`] (one per new session) reads it; parsing it each time cost
/// about 3 M instructions a session. An unreadable catalogue is logged once and read as empty.
fn catalogue() -> &'static BTreeMap<String, Vec<CatalogueEntry>> {
    static CATALOGUE: &str = include_str!("catalogue.json");
    static PARSED: std::sync::OnceLock<BTreeMap<String, Vec<CatalogueEntry>>> =
        std::sync::OnceLock::new();
    PARSED.get_or_init(|| match serde_json::from_str(CATALOGUE) {
        Ok(c) => c,
        Err(e) => {
            tracing::error!("built-in model catalogue unreadable: {e}");
            BTreeMap::new()
        }
    })
}

/// The built-in models of `provider` with `key`, its default model first, then Pi's order.
fn builtin_models(p: &BuiltinProvider, key: Option<String>) -> Vec<Model> {
    let mut models: Vec<Model> = catalogue()
        .get(p.name)
        .into_iter()
        .flatten()
        .map(|e| Model {
            name: e.name.clone(),
            api_key: key.clone(),
            context_window: e.context_window,
            max_tokens: e.max_tokens,
            reasoning: e.reasoning,
            input: e.input.clone(),
            cost: e.cost.clone(),
            thinking_level_map: e.thinking_level_map.clone(),
            compat: e.compat.clone(),
            ..Model::new(p.api, p.name, &e.id, p.base_url)
        })
        .collect();
    if let Some(i) = models.iter().position(|m| m.id == p.default_model) {
        let d = models.remove(i);
        models.insert(0, d);
    }
    models
}

/// The default model from the caller's settings (Pi's `defaultProvider` / `defaultModel`).
/// This crate reads no settings file: `pi-core`'s settings loader fills this in.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ModelDefaults {
    pub default_provider: Option<String>,
    pub default_model: Option<String>,
}

/// Errors found while loading configuration or choosing a model.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    #[error("cannot read {path}: {message}")]
    Config { path: PathBuf, message: String },
    /// A requested model that no provider configures; the second field lists some usable ones
    /// (`; usable here: a/b, c/d`) or is empty.
    #[error("unknown model \"{0}\" (expected provider/id of a configured provider{1})")]
    UnknownModel(String, String),
    /// No model was requested, none is usable, and a models.json file did not load: the
    /// offline demo is not used in its place (it runs real tools in the folder), the user is
    /// told what to fix.
    #[error("no usable model, and the model configuration did not load: {0}")]
    BrokenConfig(String),
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
/// name gives its value, anything else is the literal key (see [`crate::keys`], which also
/// registers the key for redaction).
pub fn resolve_api_key(spec: &str) -> Option<String> {
    crate::keys::resolve_api_key(spec)
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
    /// The default model from settings (set by the caller; empty after loading).
    pub defaults: ModelDefaults,
    /// True when any models.json provider was loaded.
    pub has_custom: bool,
    /// Problems met while loading, for the user to see (a broken file is skipped, not fatal).
    pub warnings: Vec<String>,
}

impl Registry {
    /// Loads `<workspace>/.pi/models.json` and `<agent dir>/models.json`, i.e. the files of a
    /// trusted workspace (see [`Registry::load_files`] for choosing them). No defaults.
    pub fn load(workspace: &Path) -> Registry {
        let mut files = vec![workspace.join(".pi").join("models.json")];
        if let Some(a) = agent_dir() {
            files.push(a.join("models.json"));
        }
        Registry::load_files(&files)
    }

    /// Loads the models.json `files` (absent ones count as empty), earlier files first: a
    /// provider named in two files is taken from the first. The built-in providers follow.
    /// No defaults: set [`Registry::defaults`] from settings.
    pub fn load_files(files: &[PathBuf]) -> Registry {
        Registry::load_files_with(files, true)
    }

    /// The registry [`Registry::select`] needs to choose `choice` (`provider/id`): when
    /// `provider` is none of the built-in providers (a models.json provider of its own name),
    /// no built-in model can be the one chosen, so only the files' providers are loaded (the
    /// built-in catalogue's 100-odd models were built and dropped for every new session:
    /// about 0.7 M instructions). Otherwise, or when the files' providers do not have it (the
    /// error lists the usable models of the whole registry), [`Registry::load_files`].
    /// Warnings, `has_custom` and the environment's keys (registered for redaction) are the
    /// same either way.
    pub fn load_for_choice(files: &[PathBuf], choice: &str) -> Registry {
        let builtin = choice
            .split_once('/')
            .is_none_or(|(p, _)| BUILTIN_PROVIDERS.iter().any(|b| b.name == p));
        if builtin {
            return Registry::load_files(files);
        }
        let reg = Registry::load_files_with(files, false);
        if reg.find(choice).is_some() {
            for p in BUILTIN_PROVIDERS {
                env_api_key(p.name);
            }
            return reg;
        }
        Registry::load_files(files)
    }

    /// [`Registry::load_files`], with the built-in providers or without them.
    fn load_files_with(files: &[PathBuf], builtins: bool) -> Registry {
        let mut reg = Registry::default();
        let mut seen = std::collections::HashSet::new();
        // models.json entries for built-in providers merge into the catalogue (Pi semantics).
        let mut builtin_cfg: BTreeMap<&'static str, ProviderConfig> = BTreeMap::new();
        for f in files {
            match read_json::<ModelsFile>(f) {
                Ok(mf) => {
                    for (name, cfg) in mf.providers {
                        if !seen.insert(name.clone()) {
                            continue;
                        }
                        match serde_json::from_value::<ProviderConfig>(cfg) {
                            Ok(p) => match BUILTIN_PROVIDERS.iter().find(|b| b.name == name) {
                                Some(b) => {
                                    builtin_cfg.insert(b.name, p);
                                }
                                None => reg.add_provider(&name, p),
                            },
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
        if !builtins {
            return reg;
        }
        for p in BUILTIN_PROVIDERS {
            let cfg = builtin_cfg.remove(p.name);
            reg.add_builtin(p, cfg);
        }
        reg
    }

    /// Adds built-in provider `p`'s catalogue, merged with its models.json entry if any:
    /// provider `baseUrl` / `apiKey` / `headers` / `compat` apply to every model,
    /// `modelOverrides` to the named ones, and `models` are upserted by id.
    fn add_builtin(&mut self, p: &BuiltinProvider, cfg: Option<ProviderConfig>) {
        let Some(cfg) = cfg else {
            self.models.extend(builtin_models(p, env_api_key(p.name)));
            return;
        };
        let key = cfg
            .api_key
            .as_deref()
            .and_then(resolve_api_key)
            .or_else(|| env_api_key(p.name));
        let mut models = builtin_models(p, key.clone());
        let mut overrides = cfg.model_overrides.clone();
        for m in models.iter_mut() {
            if let Some(base) = &cfg.base_url {
                m.base_url = base.clone();
            }
            if let Some(api) = cfg.api {
                m.api = api;
            }
            m.headers.extend(cfg.headers.clone());
            if let Some(c) = &cfg.compat {
                merge_compat(&mut m.compat, c);
            }
            if let Some(o) = overrides.remove(&m.id) {
                o.apply(m);
            }
        }
        let custom = ProviderConfig {
            api: cfg.api.or(Some(p.api)),
            base_url: cfg
                .base_url
                .clone()
                .or_else(|| Some(p.base_url.to_string())),
            api_key: None,
            ..cfg
        };
        let start = self.models.len();
        self.models.extend(models);
        let mut extra = Vec::new();
        for m in custom.models.clone() {
            let built = Self::custom_model(p.name, &custom, key.clone(), m);
            match self.models[start..].iter_mut().find(|x| x.id == built.id) {
                Some(slot) => *slot = built,
                None => extra.push(built),
            }
        }
        self.models.extend(extra);
    }

    fn custom_model(name: &str, p: &ProviderConfig, key: Option<String>, m: ModelConfig) -> Model {
        let mut headers = p.headers.clone();
        headers.extend(m.headers);
        let headers = crate::keys::resolve_headers(headers);
        Model {
            name: m.name.unwrap_or_else(|| m.id.clone()),
            id: m.id,
            api: m.api.or(p.api).unwrap_or(Api::OpenaiCompletions),
            provider: name.to_string(),
            base_url: p.base_url.clone().unwrap_or_default(),
            api_key: key,
            headers,
            context_window: m.context_window.unwrap_or(128_000),
            max_tokens: m.max_tokens.unwrap_or(16_384),
            reasoning: m.reasoning,
            input: m.input.unwrap_or_else(|| vec!["text".to_string()]),
            cost: m.cost,
            thinking_level_map: m.thinking_level_map,
            thinking_level: None,
            thinking_budgets: ThinkingBudgets::default(),
            sampling_params: m.sampling_params,
            sampling_params_by_thinking_level: m.sampling_params_by_thinking_level,
            compat: {
                // Pi 1.6 (provider-composer `mergeCompat`): the model's keys over the
                // provider's.
                let mut compat = p.compat.clone().unwrap_or(Value::Null);
                if let Some(own) = &m.compat {
                    merge_compat(&mut compat, own);
                }
                compat
            },
            script: None,
        }
    }

    fn add_provider(&mut self, name: &str, p: ProviderConfig) {
        let key = p.api_key.as_deref().and_then(resolve_api_key);
        for m in p.models.clone() {
            let model = Self::custom_model(name, &p, key.clone(), m);
            self.models.push(model);
        }
    }

    /// Finds `provider/id` (the id may itself contain `/`).
    pub fn find(&self, full: &str) -> Option<&Model> {
        let (provider, id) = full.split_once('/')?;
        self.models
            .iter()
            .find(|m| m.provider == provider && m.id == id)
    }

    /// Whether `m` can be used now: it has a key, or it belongs to a custom provider
    /// (models.json; local servers often need none). Built-in `anthropic` / `openai` models
    /// without a key are not usable.
    pub fn usable(m: &Model) -> bool {
        m.api_key.is_some() || m.provider != "anthropic" && m.provider != "openai"
    }

    /// The usable models ([`Registry::usable`]) in registry order.
    pub fn usable_models(self) -> impl Iterator<Item = Model> {
        self.models.into_iter().filter(Self::usable)
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
                .ok_or_else(|| ModelError::UnknownModel(choice.to_string(), self.usable_list()));
        }
        if let (Some(p), Some(id)) = (
            &self.defaults.default_provider,
            &self.defaults.default_model,
        ) {
            if let Some(m) = self.find(&format!("{p}/{id}")) {
                return Ok(Some(m.clone()));
            }
        }
        if let Some(p) = &self.defaults.default_provider {
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

    /// `"; usable here: p/a, p/b, …"` with at most eight usable models (a key or no key
    /// needed), or `""` when none is.
    fn usable_list(&self) -> String {
        let usable: Vec<String> = self
            .models
            .iter()
            .filter(|m| Self::usable(m))
            .map(|m| format!("{}/{}", m.provider, m.id))
            .collect();
        match usable.len() {
            0 => String::new(),
            n if n > 8 => format!("; usable here: {}, … ({n} in all)", usable[..8].join(", ")),
            _ => format!("; usable here: {}", usable.join(", ")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// models.json `cost.tiers` as Pi 1.6's `calculateCost` applies them (the values Pi 1.6.0
    /// stores for the same rates and usage): the highest tier whose `inputTokensAbove` the
    /// input (cache reads and writes included) exceeds prices the whole request; at or below
    /// every threshold the base rates.
    #[test]
    fn cost_tiers_price_the_whole_request_as_pi_1_6() {
        let rates: ModelCost = serde_json::from_value(json!({
            "input": 1, "output": 2, "cacheRead": 0, "cacheWrite": 0,
            "tiers": [{"inputTokensAbove": 1000, "input": 10, "output": 20, "cacheRead": 0, "cacheWrite": 0},
                      {"inputTokensAbove": 200000, "input": 50, "output": 60, "cacheRead": 1, "cacheWrite": 2}]}))
        .unwrap();
        let usage = |input: u64, cache_read: u64| Usage {
            input,
            output: 5,
            cache_read,
            ..Usage::default()
        };
        let cost = |c: Cost| serde_json::to_value(c).unwrap();
        assert_eq!(
            cost(calculate_cost(&rates, &usage(5000, 0))),
            json!({"input": 0.05, "output": 0.0001, "cacheRead": 0, "cacheWrite": 0,
                   "total": 0.050100000000000006, "totalFromProvider": false})
        );
        assert_eq!(
            cost(calculate_cost(&rates, &usage(1000, 0))),
            json!({"input": 0.001, "output": 0.000009999999999999999, "cacheRead": 0, "cacheWrite": 0,
                   "total": 0.00101, "totalFromProvider": false})
        );
        assert_eq!(
            cost(calculate_cost(&rates, &usage(1000, 199_001))),
            json!({"input": 0.05, "output": 0.00030000000000000003, "cacheRead": 0.19900099999999998,
                   "cacheWrite": 0, "total": 0.249301, "totalFromProvider": false})
        );
    }

    #[test]
    fn debug_hides_the_key_and_header_values() {
        let mut m = Model::new(crate::Api::OpenaiCompletions, "p", "m", "http://x");
        m.api_key = Some("sk-secret-1".into());
        m.headers.insert("x-token".into(), "secret-2".into());
        let shown = format!("{m:?}");
        assert!(!shown.contains("secret"), "{shown}");
        assert!(
            shown.contains(r#"api_key: Some("<redacted>"), headers: {"x-token": "<redacted>"}"#),
            "{shown}"
        );
    }

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
    fn catalogue_has_pi_values_and_defaults_first() {
        let reg = Registry::load(Path::new("/nonexistent-pi-ai-workspace"));
        let first_anthropic = reg
            .models
            .iter()
            .find(|m| m.provider == "anthropic")
            .unwrap();
        assert_eq!(first_anthropic.id, "claude-opus-5-5");
        let s = reg.find("anthropic/claude-sonnet-4-5").unwrap();
        assert_eq!(
            (s.context_window, s.max_tokens, s.reasoning, s.input.clone()),
            (
                200_000,
                64_000,
                true,
                vec!["text".to_string(), "image".to_string()]
            )
        );
        assert_eq!(
            s.cost,
            ModelCost {
                input: 3.0,
                output: 15.0,
                cache_read: 0.3,
                cache_write: 3.75,
                tiers: Vec::new(),
            }
        );
        let g = reg.find("openai/gpt-4.1").unwrap();
        assert_eq!(
            (g.api.as_str(), g.context_window, g.max_tokens),
            ("openai-completions", 1_047_576, 32_768)
        );
        assert_eq!(
            reg.models
                .iter()
                .filter(|m| m.provider == "anthropic")
                .count(),
            18
        );
        // Pi 1.6's thinking-level maps: `max` where the model has it, in order, and clamped
        // down (to the highest level it has) where it has not.
        let opus = reg.find("anthropic/claude-opus-5-5").unwrap();
        let all = |m: &Model| -> Vec<&str> {
            m.supported_thinking_levels()
                .iter()
                .map(|l| l.as_str())
                .collect()
        };
        assert_eq!(all(opus), ["low", "medium", "high", "xhigh", "max"]);
        assert_eq!(opus.compat["supportsMidConvoSystemMessages"], true);
        assert_eq!(all(s), ["off", "minimal", "low", "medium", "high"]);
        assert_eq!(
            s.clamp_thinking_level(ThinkingLevel::Max),
            ThinkingLevel::High
        );
        let sol = reg.find("openai/gpt-6.2-sol").unwrap();
        assert_eq!(all(sol), ["low", "medium", "high", "xhigh", "max"]);
        assert_eq!(
            sol.clamp_thinking_level(ThinkingLevel::Off),
            ThinkingLevel::Low
        );
        assert_eq!(
            reg.models
                .iter()
                .find(|m| m.provider == "openai")
                .unwrap()
                .id,
            "gpt-6.2-sol"
        );
        assert_eq!(
            api_key_env_vars("anthropic"),
            ["ANTHROPIC_OAUTH_TOKEN", "ANTHROPIC_API_KEY"]
        );
    }

    #[test]
    fn model_overrides_and_upserts_merge_into_builtins() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        std::fs::create_dir_all(dir.join(".pi")).unwrap();
        std::fs::write(
            dir.join(".pi/models.json"),
            r#"{"providers":{"anthropic":{"baseUrl":"http://127.0.0.1:9","apiKey":"sk-x",
               "modelOverrides":{"claude-sonnet-4-5":{"name":"Sonnet via proxy","maxTokens":8000,"cost":{"input":1}},
                                 "no-such-model":{"name":"ignored"}},
               "models":[{"id":"claude-haiku-4-5","contextWindow":1000},{"id":"my-claude"}]}}}"#,
        )
        .unwrap();
        let reg = Registry::load(dir);
        let s = reg.find("anthropic/claude-sonnet-4-5").unwrap();
        assert_eq!(
            (s.name.as_str(), s.max_tokens, s.cost.input, s.cost.output),
            ("Sonnet via proxy", 8000, 1.0, 15.0)
        );
        assert_eq!(
            (s.base_url.as_str(), s.api_key.as_deref()),
            ("http://127.0.0.1:9", Some("sk-x"))
        );
        let h = reg.find("anthropic/claude-haiku-4-5").unwrap();
        assert_eq!(
            (h.context_window, h.api.as_str()),
            (1000, "anthropic-messages")
        );
        assert!(reg.find("anthropic/my-claude").is_some());
        assert_eq!(
            reg.models
                .iter()
                .filter(|m| m.id == "claude-haiku-4-5")
                .count(),
            1
        );
    }

    #[test]
    fn workspace_models_json_wins_and_is_selected_first() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        std::fs::create_dir_all(dir.join(".pi")).unwrap();
        std::fs::write(
            dir.join(".pi/models.json"),
            r#"{"providers":{"local":{"baseUrl":"http://127.0.0.1:1/v1","api":"openai-completions","apiKey":"x",
               "models":[{"id":"m1","contextWindow":1000,"maxTokens":100}]},
               "ant":{"baseUrl":"http://127.0.0.1:2","api":"anthropic-messages","apiKey":"y","models":[{"id":"c"}]}}}"#,
        )
        .unwrap();
        let reg = Registry::load(dir);
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
            Err(ModelError::UnknownModel(..))
        ));
    }

    #[test]
    fn api_strings_round_trip_and_unknown_ones_are_named_at_load() {
        for api in Api::ALL {
            let json = serde_json::to_value(api).unwrap();
            assert_eq!(json, Value::String(api.as_str().to_string()));
            assert_eq!(serde_json::from_value::<Api>(json).unwrap(), api);
            assert_eq!(api.as_str().parse::<Api>(), Ok(api));
        }
        assert_eq!(
            "google-generative-ai"
                .parse::<Api>()
                .unwrap_err()
                .to_string(),
            "unknown api \"google-generative-ai\" (known: anthropic-messages, openai-completions, \
             openai-responses, scripted)"
        );
        let tmp = tempfile::tempdir().unwrap();
        let file = tmp.path().join("models.json");
        std::fs::write(
            &file,
            r#"{"providers":{"gem":{"baseUrl":"http://127.0.0.1:1","api":"google-generative-ai","models":[{"id":"g"}]},
               "odd":{"baseUrl":"http://127.0.0.1:2","models":[{"id":"o","api":"bedrock"}]},
               "ok":{"baseUrl":"http://127.0.0.1:3/v1","models":[{"id":"k"}]}}}"#,
        )
        .unwrap();
        let reg = Registry::load_files(std::slice::from_ref(&file));
        assert_eq!(
            reg.warnings,
            vec![
                format!(
                    "{}: provider gem: unknown variant `google-generative-ai`, expected one of \
                     `anthropic-messages`, `openai-completions`, `openai-responses`, `scripted`",
                    file.display()
                ),
                format!(
                    "{}: provider odd: unknown variant `bedrock`, expected one of \
                     `anthropic-messages`, `openai-completions`, `openai-responses`, `scripted`",
                    file.display()
                ),
            ]
        );
        let custom: Vec<(String, Api)> = reg
            .models
            .iter()
            .filter(|m| !matches!(m.provider.as_str(), "anthropic" | "openai"))
            .map(|m| (m.full_id(), m.api))
            .collect();
        assert_eq!(custom, vec![("ok/k".to_string(), Api::OpenaiCompletions)]);
    }

    /// `supportsMidConvoSystemMessages` as Pi 1.6 resolves a model's `compat`: the catalogue's
    /// flags, a provider's `compat` over them, a custom model's own over its provider's, a
    /// `modelOverrides` entry's over the model's, key by key.
    #[test]
    fn compat_layers_merge_key_by_key_as_pi() {
        let tmp = tempfile::tempdir().unwrap();
        let file = tmp.path().join("models.json");
        std::fs::write(
            &file,
            r#"{"providers":{
                "anthropic":{"modelOverrides":{"claude-opus-5-5":{"compat":{"supportsMidConvoSystemMessages":false}}}},
                "gw":{"baseUrl":"http://127.0.0.1:3/v1","compat":{"supportsDeveloperRole":false},
                      "models":[{"id":"plain"},{"id":"mid","compat":{"supportsMidConvoSystemMessages":true}}]}}}"#,
        )
        .unwrap();
        let reg = Registry::load_files(std::slice::from_ref(&file));
        assert_eq!(reg.warnings, Vec::<String>::new());
        let gw = |id: &str| reg.find(&format!("gw/{id}")).unwrap();
        assert_eq!(gw("plain").compat, json!({"supportsDeveloperRole": false}));
        assert_eq!(
            gw("mid").compat,
            json!({"supportsDeveloperRole": false, "supportsMidConvoSystemMessages": true})
        );
        assert!(!gw("plain").supports_mid_convo_system_messages());
        assert!(gw("mid").supports_mid_convo_system_messages());
        let opus = reg.find("anthropic/claude-opus-5-5").unwrap();
        assert!(!opus.supports_mid_convo_system_messages());
        // The override changed one flag; the catalogue's others stay.
        assert_eq!(opus.compat["forceAdaptiveThinking"], true);
        let builtin = Registry::load_files(&[]);
        assert!(builtin
            .find("anthropic/claude-opus-5-5")
            .unwrap()
            .supports_mid_convo_system_messages());
    }

    /// Choosing a model of a models.json provider of its own name loads only the files'
    /// providers, and gives the model the whole registry gives; a built-in provider's model,
    /// or one the files do not have, is chosen from the whole registry (the error lists its
    /// usable models).
    #[test]
    fn a_custom_providers_model_is_chosen_without_the_catalogue() {
        let tmp = tempfile::tempdir().unwrap();
        let file = tmp.path().join("models.json");
        std::fs::write(
            &file,
            r#"{"providers":{"local":{"baseUrl":"http://127.0.0.1:9/v1","api":"openai-completions","apiKey":"k",
               "headers":{"x-h":"v"},"compat":{"supportsDeveloperRole":false},
               "models":[{"id":"m1","contextWindow":1000,"maxTokens":100}]},
               "anthropic":{"apiKey":"sk-x"}}}"#,
        )
        .unwrap();
        let files = [file, tmp.path().join("absent.json")];
        let whole = Registry::load_files(&files);
        let shown = |m: &Model| format!("{m:?} {:?} {:?} {}", m.api_key, m.headers, m.base_url);
        let reg = Registry::load_for_choice(&files, "local/m1");
        assert_eq!(
            reg.models.iter().map(shown).collect::<Vec<_>>(),
            [shown(whole.find("local/m1").unwrap())]
        );
        assert_eq!(
            (reg.has_custom, &reg.warnings),
            (whole.has_custom, &whole.warnings)
        );
        assert_eq!(
            shown(&reg.select(Some("local/m1"), None).unwrap().unwrap()),
            shown(&whole.select(Some("local/m1"), None).unwrap().unwrap())
        );
        // A built-in provider's model, a model the files lack, a choice without a provider:
        // the whole registry.
        for choice in ["anthropic/claude-sonnet-4-5", "local/none", "m1"] {
            assert_eq!(
                Registry::load_for_choice(&files, choice).models.len(),
                whole.models.len(),
                "{choice}"
            );
        }
        let err = Registry::load_for_choice(&files, "local/none")
            .select(Some("local/none"), None)
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            whole
                .select(Some("local/none"), None)
                .unwrap_err()
                .to_string()
        );
        assert!(err.contains("local/m1"), "{err}");
    }
}

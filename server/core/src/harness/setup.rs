//! How a session is set up from the workspace's configuration, the same for the editor server
//! and the headless `run` command: choosing the model (with the offline scripted fallback),
//! the sessions folder, the agent configuration (tools, system prompt, retry, compaction) and
//! prompt expansion.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use crate::agent::AgentConfig;
use crate::fs::Fs;
use crate::resources::WorkspaceConfig;
use crate::session::SessionWriter;
use crate::tools::{BeforeBash, ToolState};
use pi_ai::models::{ModelDefaults, ModelError, ThinkingLevel, SCRIPTED_API};
use pi_ai::{Model, Registry};
use serde_json::Value;

/// The offline script replayed when no provider is configured.
const DEMO_SCRIPT: &str = include_str!("../../../../fixtures/scripted/demo.json");

/// The line printed (headless) or shown (editor) when the scripted model is used. It names
/// nothing of the source tree (the script is built into the binary, so a user who installed
/// the binary has no such file): what answers, and what to do for a real model.
pub const SCRIPTED_NOTICE: &str = "pi-lsp: no usable model (no API key, no models.json that loads here); the offline scripted model built into pi-lsp answers instead (a fixed demo script, no model is called). To use a real model, set a provider's API key (such as ANTHROPIC_API_KEY or OPENAI_API_KEY) or add a models.json to ~/.pi/agent/ (or $PI_CODING_AGENT_DIR).";

/// Where the workspace's sessions live: the command line's folder ([`crate::resources::RunOverrides::session_dir`]), else `$PI_CODING_AGENT_SESSION_DIR`, else settings'
/// `sessionDir` (global, or the project's in a trusted workspace; relative to the workspace,
/// `~` expanded), else `<workspace>/.pi/sessions` (Pi's precedence, `docs/settings.md`).
pub fn sessions_dir(ws: &WorkspaceConfig) -> PathBuf {
    if let Some(d) = &ws.overrides().session_dir {
        return d.clone();
    }
    let configured = std::env::var("PI_CODING_AGENT_SESSION_DIR")
        .ok()
        .filter(|d| !d.trim().is_empty())
        .or_else(|| {
            ws.settings()
                .raw("sessionDir")
                .and_then(|v| v.as_str())
                .filter(|d| !d.trim().is_empty())
                .map(str::to_string)
        });
    match configured {
        Some(d) => {
            let d = match d.strip_prefix("~/") {
                Some(rest) => std::env::var_os("HOME")
                    .map(|h| PathBuf::from(h).join(rest))
                    .unwrap_or_else(|| PathBuf::from(&d)),
                None => PathBuf::from(&d),
            };
            if d.is_absolute() {
                d
            } else {
                ws.root().join(d)
            }
        }
        None => ws.root().join(".pi").join("sessions"),
    }
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

/// Chooses the model as [`Registry::select`] does, from the workspace's models.json files
/// (the project's only when trusted) and its settings' `defaultProvider` / `defaultModel`,
/// with Pi 1.6's thinking level for a new session clamped to what the model supports:
/// `modelThinkingLevels["provider/id"]`, else `defaultThinkingLevel`, else
/// [`DEFAULT_THINKING_LEVEL`]. Falls back to the scripted
/// model (and says so with `Some(notice)`) only when nothing at all is configured and nothing
/// was requested; a models.json that does not load is [`ModelError::BrokenConfig`] then, not
/// the demo.
pub fn choose_model(
    ws: &WorkspaceConfig,
    requested: Option<&str>,
    init: Option<&str>,
) -> Result<(Model, Option<&'static str>), ModelError> {
    let settings = ws.settings();
    let mut reg = match requested.or(init).filter(|c| *c != "scripted/demo") {
        Some(choice) => Registry::load_for_choice(&ws.models_files(), choice),
        None => Registry::load_files(&ws.models_files()),
    };
    reg.defaults = ModelDefaults {
        default_provider: settings.default_provider.clone(),
        default_model: settings.default_model.clone(),
    };
    for w in &reg.warnings {
        tracing::warn!("{w}");
    }
    if requested == Some("scripted/demo") || (requested.is_none() && init == Some("scripted/demo"))
    {
        return Ok((scripted_model(), None));
    }
    match reg.select(requested, init)? {
        Some(mut m) => {
            let level = model_thinking_level(&settings, &m)
                .or(settings.default_thinking_level)
                .unwrap_or(DEFAULT_THINKING_LEVEL);
            m.thinking_level = Some(m.clamp_thinking_level(level));
            Ok((m, None))
        }
        None if requested.is_none() && init.is_none() && !reg.warnings.is_empty() => {
            Err(ModelError::BrokenConfig(reg.warnings.join("; ")))
        }
        None if requested.is_none() && init.is_none() => {
            Ok((scripted_model(), Some(SCRIPTED_NOTICE)))
        }
        None => Err(ModelError::NoModel),
    }
}

/// Pi 1.6's thinking level when nothing chooses one (`DEFAULT_THINKING_LEVEL` in its
/// `dist/core/defaults.js`), clamped to the model ([`Model::clamp_thinking_level`]: `off` for
/// a model without reasoning).
pub const DEFAULT_THINKING_LEVEL: ThinkingLevel = ThinkingLevel::Medium;

/// The level settings' `modelThinkingLevels` (`{"provider/id": level}`, Pi 1.6's
/// `getModelThinkingLevel`) give `model`; `None` when unset or not a level's name.
pub fn model_thinking_level(
    settings: &crate::settings::Settings,
    model: &Model,
) -> Option<ThinkingLevel> {
    settings
        .raw("modelThinkingLevels")?
        .get(format!("{}/{}", model.provider, model.id))?
        .as_str()
        .and_then(ThinkingLevel::parse)
}

/// The thinking level of a session resumed from a file without a `thinking_level_change`
/// entry, as Pi 1.6's `createAgentSession` gives it: `defaultThinkingLevel`, else
/// [`DEFAULT_THINKING_LEVEL`] (not `modelThinkingLevels`), clamped to `model`.
pub fn resumed_thinking_level(
    settings: &crate::settings::Settings,
    model: &Model,
) -> ThinkingLevel {
    model.clamp_thinking_level(
        settings
            .default_thinking_level
            .unwrap_or(DEFAULT_THINKING_LEVEL),
    )
}

/// The notice for an untrusted workspace whose project configuration is being ignored, or
/// `None` when there is none to ignore.
pub fn untrusted_notice(ws: &WorkspaceConfig, how_to_trust: &str) -> Option<String> {
    let ignored = ws.ignored_project_files();
    if ignored.is_empty() {
        return None;
    }
    let names: Vec<String> = ignored
        .iter()
        .map(|p| p.strip_prefix(ws.root()).unwrap_or(p).display().to_string())
        .collect();
    Some(format!(
        "pi-lsp: workspace not trusted; ignoring project configuration: {} ({how_to_trust})",
        names.join(", ")
    ))
}

/// Compaction for a run of `model` in `ws` whose session is written by `writer`: the settings'
/// thresholds for that model (`compaction.modelOverrides["provider/id"]` first, as Pi 1.6:
/// [`crate::settings::Settings::compaction_for`]), and the `compaction` entries appended to
/// that file.
pub fn compaction_config(
    ws: &WorkspaceConfig,
    writer: &Arc<Mutex<SessionWriter>>,
    model: &Model,
) -> crate::agent::CompactionConfig {
    crate::agent::CompactionConfig {
        settings: ws.settings().compaction_for(&model.provider, &model.id),
        compactor: Arc::new(crate::compaction::SessionCompactor::new(writer.clone())),
    }
}

/// The agent configuration for a run in `ws` with `model`: the default tools over `fs`
/// (`allowedDirs` from settings), the system prompt assembled from the workspace's resources
/// (context files, `SYSTEM.md` / `APPEND_SYSTEM.md`, skills; re-read for every call) plus
/// `extra_guidelines`, and the settings' retry policy. `bash` runs in the settings' sandbox;
/// with `approver` (and the session's id, which names its temp folder) it asks before leaving it.
pub fn agent_config(
    ws: &WorkspaceConfig,
    model: Model,
    fs: Arc<dyn Fs>,
    before_bash: Option<BeforeBash>,
    extra_guidelines: &[String],
    approver: Option<(Arc<dyn crate::sandbox::Approver>, &str)>,
) -> AgentConfig {
    agent_config_with(
        ws,
        model,
        fs,
        before_bash,
        extra_guidelines,
        approver,
        RunAdditions::default(),
    )
}

/// What a session adds to [`agent_config`]'s run beyond the workspace's defaults.
#[derive(Default)]
pub struct RunAdditions<'a> {
    /// The approval gate ([`crate::approval`]): the loop checks every call with it, and
    /// `edit` / `write` ask it with their proposed change. `None`: nothing asks.
    pub approval: Option<Arc<crate::approval::Gate>>,
    /// Tools after the default ones (extensions' tools), in the tool list and in the system
    /// prompt's.
    pub extra_tools: Vec<Arc<dyn crate::agent::Tool>>,
    /// Tools added last (the editor's declared tools and `diagnostics`,
    /// the editor server's `editor_tools`): called with the names already taken and the settings'
    /// `allowedDirs`, before the system prompt is built so their snippets and guidelines are
    /// in it.
    pub late_tools: Option<LateTools<'a>>,
    /// Changes the final tool list before the system prompt is built from it (extensions'
    /// [`crate::extension::ExtensionApi::filter_tools`], e.g. plan mode's tools).
    pub tool_filter: Option<ToolFilter<'a>>,
    /// What `bash` exports about the session ([`crate::tools::session_env`]).
    pub session_env: Vec<(String, String)>,
    /// Where `bash` runs its commands when not here ([`SessionSetup::bash_executor`]).
    ///
    /// [`SessionSetup::bash_executor`]: crate::harness::SessionSetup::bash_executor
    pub bash_executor: Option<Arc<dyn crate::tools::BashExecutor>>,
    /// What the model read of each file, kept by the session across its runs (case EDIT-08);
    /// `None`: a tracker of this tool set's own.
    pub reads: Option<Arc<crate::tools::ReadTracker>>,
    /// The tool loadout the session's branch recorded, restored once when the session was
    /// resumed or its branch changed ([`RecordedTools::of_branch`]; Pi 1.6 "Resumed sessions
    /// keep their active tools"). `None`: nothing recorded (a new session, a file without
    /// system messages), so `defaultTools` selects. See [`RecordedTools::keeps`].
    pub recorded_tools: Option<&'a RecordedTools>,
}

/// The built-in tools ([`crate::tools::tools_for_session`]), Pi's base tool definitions: a
/// restored loadout leaves out the ones it does not name ([`RecordedTools::keeps`]).
pub const BUILTIN_TOOLS: [&str; 7] = ["read", "bash", "edit", "write", "grep", "find", "ls"];

/// A branch's recorded tool loadout, as Pi 1.6's `_restoreToolsFromTranscript`
/// (`dist/core/agent-session.js`) reads it: the branch's stored system messages (every one on
/// the branch, before a compaction too) replayed in order — `toolsRemoved` then `toolsAdded`
/// by name — give the tools it last ran with; every name a message added or removed is
/// *mentioned*.
///
/// Plan mode's tool set is recorded too (a run in plan mode stores the set it offers),
/// but it is never the user's choice: the system messages stored while the branch's last
/// `plan-mode` custom entry said `enabled: true` are left out of the replay, so leaving the
/// plan brings `edit` / `write` back (a session that only ran in plan mode recorded no choice:
/// `None`). A `plan-mode` entry turning plan mode on with `toolsBeforePlanMode` (Pi's
/// example records the active tools there) sets the loadout to that list, as Pi's example
/// restores it when the plan is left.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecordedTools {
    /// The tools the replay ends with, in first-added order.
    pub current: Vec<String>,
    /// Every tool a replayed message added or removed.
    pub mentioned: std::collections::HashSet<String>,
}

impl RecordedTools {
    /// The loadout of `branch`: its `message` entries with `role: "system"` and its `custom`
    /// entries (other entries are skipped), root first. `None` when no system message outside
    /// plan mode is among them.
    pub fn of_branch(branch: &[Value]) -> Option<RecordedTools> {
        let mut out = RecordedTools::default();
        let mut seen = false;
        let mut in_plan = false;
        for e in branch {
            match e["type"].as_str() {
                Some("custom") if e["customType"] == crate::extension::plan::PLAN_MODE_ENTRY => {
                    in_plan = e["data"]["enabled"].as_bool().unwrap_or(false);
                    let before = &e["data"]["toolsBeforePlanMode"];
                    if let Some(names) = crate::extension::plan::tool_names(before) {
                        seen = true;
                        out.mentioned.extend(names.iter().cloned());
                        out.current = names;
                    }
                }
                Some("message") if e["message"]["role"] == "system" && !in_plan => {
                    seen = true;
                    let m = &e["message"];
                    for t in m["toolsRemoved"].as_array().into_iter().flatten() {
                        if let Some(n) = t["name"].as_str() {
                            out.current.retain(|c| c != n);
                            out.mentioned.insert(n.to_string());
                        }
                    }
                    for t in m["toolsAdded"].as_array().into_iter().flatten() {
                        if let Some(n) = t["name"].as_str() {
                            if !out.current.iter().any(|c| c == n) {
                                out.current.push(n.to_string());
                            }
                            out.mentioned.insert(n.to_string());
                        }
                    }
                }
                _ => {}
            }
        }
        seen.then_some(out)
    }

    /// The loadout of the branch ending at `writer`'s leaf ([`RecordedTools::of_branch`]),
    /// reading only the entries that may be system messages or custom entries.
    pub fn of_writer(writer: &SessionWriter) -> Option<RecordedTools> {
        let leaf = writer.leaf()?;
        let system = crate::session::EntryShape::kind_or_role_test("system");
        let custom = crate::session::EntryShape::kind_or_role_test("custom");
        let entries: Vec<Value> = writer
            .tree()
            .path_where(leaf, |s| system(s) || custom(s))
            .into_iter()
            .filter(|e| e.kind == "custom" || (e.kind == "message" && e.role() == Some("system")))
            .map(|e| e.raw())
            .collect();
        RecordedTools::of_branch(&entries)
    }

    /// Whether the restored loadout keeps the tool `name` (Pi's rule): a built-in tool
    /// ([`BUILTIN_TOOLS`]) when the replay ends with it; any other tool (`todo`, extensions',
    /// the editor's) when the replay ends with it or never mentioned it (registered after the
    /// loadout was recorded, so on as a newly registered tool is).
    pub fn keeps(&self, name: &str) -> bool {
        self.current.iter().any(|c| c == name)
            || (!BUILTIN_TOOLS.contains(&name) && !self.mentioned.contains(name))
    }
}

/// The recorded loadout a run restores (Pi 1.6's `usesDefaultTools`): `recorded`, unless
/// `--tools` names the tools (a list of only `+name` / `-name` entries applies on top of it
/// instead), or `--no-tools` / `--no-builtin-tools` is given (Pi restores nothing with any
/// `noTools`).
pub fn restored_tools<'a>(
    ws: &WorkspaceConfig,
    recorded: Option<&'a RecordedTools>,
) -> Option<&'a RecordedTools> {
    let o = ws.overrides();
    recorded.filter(|_| {
        !o.no_builtin_tools
            && o.tools
                .as_ref()
                .is_none_or(|l| l.iter().any(|e| is_tool_modifier(e)))
    })
}

/// A session's tools that come and go (MCP's) under the branch's restored loadout
/// ([`restored_tools`]; Pi 1.6's `_restoreToolsFromTranscript`): a tool the replay removed
/// stays off when its server registers it again ([`RecordedTools::keeps`]), unless `--tools
/// +name` adds it back.
pub struct RecordedToolFilter {
    pub inner: Arc<dyn crate::agent::ToolProvider>,
    pub recorded: RecordedTools,
    /// The `--tools` entries (only `+name` / `-name` ones reach here).
    pub entries: Vec<String>,
}

#[async_trait::async_trait]
impl crate::agent::ToolProvider for RecordedToolFilter {
    async fn tools(self: Arc<Self>) -> Vec<Arc<dyn crate::agent::Tool>> {
        let mut tools = self.inner.clone().tools().await;
        tools.retain(|t| {
            let name = t.name();
            self.recorded.keeps(&name)
                || self
                    .entries
                    .iter()
                    .any(|e| e.strip_prefix('+') == Some(&*name))
        });
        tools
    }
}

/// See [`RunAdditions::tool_filter`]: called with the registered tools ([`registered_tools`])
/// and the run's active ones, which it may change.
pub type ToolFilter<'a> =
    &'a dyn Fn(&[Arc<dyn crate::agent::Tool>], &mut Vec<Arc<dyn crate::agent::Tool>>);

/// The tools of `all` Pi 1.6 registers for a session (its tool registry, `createAgentSession`'s
/// `allowedToolNames`): every one, unless `entries` (`--tools`) is a list of names or
/// patterns, which registers only the tools it matches (a `+name` / `-name` list registers
/// every tool). What an extension may turn on ([`ToolFilter`]; Pi's `setActiveTools` skips
/// names not registered).
pub fn registered_tools(
    all: &[Arc<dyn crate::agent::Tool>],
    entries: Option<&[String]>,
) -> Vec<Arc<dyn crate::agent::Tool>> {
    match entries {
        Some(list) if !list.iter().any(|e| is_tool_modifier(e)) => all
            .iter()
            .filter(|t| {
                let name = t.name();
                list.iter().any(|p| tool_pattern_matches(p, &name))
            })
            .cloned()
            .collect(),
        _ => all.to_vec(),
    }
}

/// See [`RunAdditions::late_tools`].
pub type LateTools<'a> =
    Box<dyn FnOnce(&[String], &[PathBuf]) -> Vec<Arc<dyn crate::agent::Tool>> + 'a>;

/// [`agent_config`] with a session's [`RunAdditions`].
pub fn agent_config_with(
    ws: &WorkspaceConfig,
    model: Model,
    fs: Arc<dyn Fs>,
    before_bash: Option<BeforeBash>,
    extra_guidelines: &[String],
    approver: Option<(Arc<dyn crate::sandbox::Approver>, &str)>,
    additions: RunAdditions<'_>,
) -> AgentConfig {
    let RunAdditions {
        approval: gate,
        extra_tools,
        late_tools,
        tool_filter,
        session_env,
        bash_executor,
        reads,
        recorded_tools,
    } = additions;
    let settings = ws.settings();
    let resources = ws.resources();
    for w in &resources.warnings {
        tracing::debug!("{w}");
    }
    let state = Arc::new(ToolState {
        allowed_dirs: settings.allowed_dirs.clone(),
        approval: gate.clone(),
        folders: ws.folders(),
        session_env,
        bash_executor,
        reads: reads.unwrap_or_default(),
        root_real: Default::default(),
        images_unresized: !settings.image_auto_resize(),
    });
    // The sandbox follows the trust-gated settings, never a project file of an untrusted
    // workspace.
    let sandbox = crate::sandbox::SandboxSettings::from_settings(&settings);
    let allowed = state.allowed();
    let mut tools = match approver {
        Some((approver, session_id)) => crate::tools::tools_for_session(
            fs,
            before_bash,
            state,
            &sandbox,
            Some(approver),
            session_id,
        ),
        None => crate::tools::tools_for_session(fs, before_bash, state, &sandbox, None, ""),
    };
    // Every tool there is, before any selection: `--tools` may name one `defaultTools` left out.
    let mut all = tools.clone();
    // Pi 1.6 restores the recorded loadout unless `--tools` names the tools (a list of
    // `+name` / `-name` applies on top of it, below).
    let no_builtin = ws.overrides().no_builtin_tools;
    let restored = restored_tools(ws, recorded_tools);
    let keep = |t: &Arc<dyn crate::agent::Tool>| restored.is_none_or(|r| r.keeps(&t.name()));
    match restored {
        Some(_) => tools.retain(keep),
        None if no_builtin => tools.clear(),
        None => apply_default_tools(&mut tools, settings.raw("defaultTools")),
    }
    all.extend(extra_tools.iter().cloned());
    tools.extend(extra_tools.into_iter().filter(keep));
    if let Some(late) = late_tools {
        let names: Vec<String> = all.iter().map(|t| t.name().into_owned()).collect();
        let late = late(&names, &allowed);
        all.extend(late.iter().cloned());
        tools.extend(late.into_iter().filter(keep));
    }
    if let Some(list) = &ws.overrides().tools {
        let names: Vec<String> = all.iter().map(|t| t.name().into_owned()).collect();
        if let Some(w) = cli_tools_warning(&names, list) {
            warn_once(w);
        }
        tools = select_cli_tools(&all, &tools, list);
    }
    if let Some(filter) = tool_filter {
        filter(
            &registered_tools(&all, ws.overrides().tools.as_deref()),
            &mut tools,
        );
    }
    let sections =
        crate::prompt::system_prompt_sections(ws.root(), &tools, &resources, extra_guidelines);
    let prompt = crate::prompt::render_sections(&sections);
    let mut cfg = AgentConfig::new(model, prompt, tools);
    // Pi 1.6 gives the agent's requests settings' `thinkingBudgets` (sdk.js).
    cfg.model.thinking_budgets = settings.thinking_budgets;
    cfg.prompt_sections = Some(sections.into());
    cfg.retry = settings.retry.to_retry_settings();
    cfg.approval = gate;
    cfg.block_images = settings.block_images();
    cfg
}

/// What the user typed, expanded as Pi does: `/skill:name args` (unless `enableSkillCommands`
/// is off) and `/template args` from the workspace's skills and prompt templates.
pub fn expand_prompt(ws: &WorkspaceConfig, text: &str) -> String {
    if !text.starts_with('/') {
        return text.to_string();
    }
    ws.resources()
        .expand(text, ws.settings().enable_skill_commands)
}

/// The thinking level a session records for `model` (Pi writes `off` when none is set).
pub fn thinking_level_name(model: &Model) -> &'static str {
    model.thinking_level.map(|l| l.as_str()).unwrap_or("off")
}

/// Pi 1.6's `defaultTools` over the built-in tools (`read`, `bash`, `edit`, `write`, `grep`,
/// `find`, `ls`; docs/settings.md "The default tools"): names without a sign select the tools
/// (the others are left out), then `-name` removes one and `+name` puts one back. No setting,
/// or not a list of strings: all seven. Names of other tools (`todo`, extensions', MCP's) are
/// not handled here (`-todo`: [`crate::extension::builtins`]).
pub fn apply_default_tools(tools: &mut Vec<Arc<dyn crate::agent::Tool>>, setting: Option<&Value>) {
    let Some(list) = setting.and_then(Value::as_array) else {
        return;
    };
    let names: Vec<&str> = list.iter().filter_map(Value::as_str).collect();
    let plain: Vec<&str> = names
        .iter()
        .copied()
        .filter(|n| !n.starts_with('+') && !n.starts_with('-'))
        .collect();
    let keep = |name: &str| -> bool {
        let mut on = plain.is_empty() || plain.contains(&name);
        for n in &names {
            if n.strip_prefix('-') == Some(name) {
                on = false;
            } else if n.strip_prefix('+') == Some(name) {
                on = true;
            }
        }
        on
    };
    tools.retain(|t| keep(&t.name()));
}

/// Whether `entry` is a `+name` / `-name` modifier (Pi's `isToolModifier`).
fn is_tool_modifier(entry: &str) -> bool {
    entry.starts_with('+') || entry.starts_with('-')
}

/// Why a `--tools` / `defaultTools` list is refused, in Pi 1.6's words
/// (`getToolListError`): plain names mixed with `+name` / `-name` entries, or a `*` pattern in
/// a modifier. `None` when the list is usable.
pub fn tool_list_error(entries: &[String]) -> Option<String> {
    let modifiers: Vec<&String> = entries.iter().filter(|e| is_tool_modifier(e)).collect();
    if modifiers.is_empty() {
        return None;
    }
    if modifiers.len() < entries.len() {
        return Some("tool names cannot be mixed with +name or -name entries".into());
    }
    modifiers
        .iter()
        .find(|e| e.contains('*'))
        .map(|p| format!("+name and -name entries take exact tool names, not patterns: {p}"))
}

/// Whether `name` matches `pattern`, where `*` matches any characters (Pi's `--tools`
/// patterns); anything else matches itself.
fn tool_pattern_matches(pattern: &str, name: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    if parts.len() == 1 {
        return pattern == name;
    }
    let Some(mut rest) = name.strip_prefix(parts[0]) else {
        return false;
    };
    for mid in &parts[1..parts.len() - 1] {
        match rest.find(mid) {
            Some(i) => rest = &rest[i + mid.len()..],
            None => return false,
        }
    }
    rest.ends_with(parts[parts.len() - 1])
}

/// Logs `text` as a warning the first time this process sees it (a session's configuration
/// is rebuilt for every run).
fn warn_once(text: String) {
    static SEEN: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
    let Ok(mut seen) = SEEN.lock() else { return };
    if !seen.contains(&text) {
        tracing::warn!("{text}");
        seen.push(text);
    }
}

/// The `--tools` entries that name no tool of `names` (every tool there is, before any
/// selection): a plain name no tool has, a `*` pattern that matches none, a `+name` / `-name`
/// of no tool. Entries for MCP tools (`mcp__…`) are not judged: their servers may connect
/// later.
pub fn unknown_cli_tools(names: &[String], entries: &[String]) -> Vec<String> {
    entries
        .iter()
        .filter(|e| {
            let pattern = e.trim_start_matches(['+', '-']);
            !pattern.starts_with("mcp__") && !names.iter().any(|n| tool_pattern_matches(pattern, n))
        })
        .cloned()
        .collect()
}

/// The warning for `--tools` entries that name no tool ([`unknown_cli_tools`]), naming them
/// and the tools there are. Pi 1.6 runs such a list silently (with no tools for
/// `--tools nosuchtool`); the run here is the same, with this warning on stderr.
pub fn cli_tools_warning(names: &[String], entries: &[String]) -> Option<String> {
    let unknown = unknown_cli_tools(names, entries);
    if unknown.is_empty() {
        return None;
    }
    let mut known: Vec<&str> = names.iter().map(String::as_str).collect();
    known.sort_unstable();
    known.dedup();
    Some(format!(
        "--tools: no tool matches {}; the tools are {} (and MCP tools, mcp__<server>__<tool>)",
        unknown
            .iter()
            .map(|u| format!("\"{u}\""))
            .collect::<Vec<_>>()
            .join(", "),
        known.join(", ")
    ))
}

/// Whether `--tools` keeps the MCP tool `name` (Pi 1.6: an allowlist filters MCP tools too): a
/// list of names or patterns keeps the tools an entry matches; a list of `+name` / `-name`
/// entries keeps every tool but a `-name` one.
pub fn cli_keeps_tool(entries: &[String], name: &str) -> bool {
    if entries.iter().any(|e| is_tool_modifier(e)) {
        !entries.iter().any(|e| e.strip_prefix('-') == Some(name))
    } else {
        entries.iter().any(|p| tool_pattern_matches(p, name))
    }
}

/// A session's tools that come and go (MCP's, [`crate::agent::ToolProvider`]) filtered by
/// `--tools` ([`cli_keeps_tool`]).
pub struct CliToolFilter {
    pub inner: Arc<dyn crate::agent::ToolProvider>,
    /// The `--tools` entries.
    pub entries: Vec<String>,
}

#[async_trait::async_trait]
impl crate::agent::ToolProvider for CliToolFilter {
    async fn tools(self: Arc<Self>) -> Vec<Arc<dyn crate::agent::Tool>> {
        let mut tools = self.inner.clone().tools().await;
        tools.retain(|t| cli_keeps_tool(&self.entries, &t.name()));
        tools
    }
}

/// Pi 1.6's `--tools` over a session's tools (`docs/cli.md` "Tools"): a list of plain names
/// or `*` patterns replaces the selection — every tool of `all` that an entry matches, in
/// `all`'s order; a list of only `+name` / `-name` entries changes `selected` (the default
/// selection after `defaultTools`) in order, `+name` adding the tool of `all` by that name.
/// Unknown names select nothing (warned about, [`cli_tools_warning`]). MCP tools come later
/// and are filtered by [`CliToolFilter`].
pub fn select_cli_tools(
    all: &[Arc<dyn crate::agent::Tool>],
    selected: &[Arc<dyn crate::agent::Tool>],
    entries: &[String],
) -> Vec<Arc<dyn crate::agent::Tool>> {
    if !entries.iter().any(|e| is_tool_modifier(e)) {
        return all
            .iter()
            .filter(|t| {
                let name = t.name();
                entries.iter().any(|p| tool_pattern_matches(p, &name))
            })
            .cloned()
            .collect();
    }
    let mut out: Vec<Arc<dyn crate::agent::Tool>> = selected.to_vec();
    for e in entries {
        let name = &e[1..];
        let at = out.iter().position(|t| t.name() == name);
        match (e.starts_with('+'), at) {
            (true, None) => {
                if let Some(t) = all.iter().find(|t| t.name() == name) {
                    out.push(t.clone());
                }
            }
            (false, Some(i)) => {
                out.remove(i);
            }
            _ => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn cli_tools_filter_mcp_tools_and_name_unknown_entries() {
        let names = strings(&["read", "bash", "grep"]);
        // An allowlist keeps the MCP tools it matches (Pi 1.6: `--tools` filters them too).
        let list = strings(&["read", "mcp__docs__*"]);
        assert!(cli_keeps_tool(&list, "mcp__docs__search"));
        assert!(!cli_keeps_tool(&list, "mcp__git__log"));
        // Modifiers keep every MCP tool but a `-name` one.
        let mods = strings(&["-bash", "-mcp__git__log"]);
        assert!(cli_keeps_tool(&mods, "mcp__docs__search"));
        assert!(!cli_keeps_tool(&mods, "mcp__git__log"));
        // Unknown entries: plain names, empty patterns, modifiers of no tool; never `mcp__`.
        let entries = strings(&["read", "nosuch", "g*", "x*", "+ls", "mcp__a__b"]);
        assert_eq!(
            unknown_cli_tools(&names, &entries),
            strings(&["nosuch", "x*", "+ls"])
        );
        assert_eq!(
            cli_tools_warning(&names, &entries).as_deref(),
            Some("--tools: no tool matches \"nosuch\", \"x*\", \"+ls\"; the tools are bash, grep, read (and MCP tools, mcp__<server>__<tool>)")
        );
        assert_eq!(cli_tools_warning(&names, &strings(&["read", "g*"])), None);
    }

    /// Pi 1.6's `_restoreToolsFromTranscript` over a branch: removals then additions replayed
    /// by name, every added or removed name mentioned; built-in tools only when the replay
    /// ends with them, other tools also when never mentioned; the messages stored in plan mode
    /// left out (a branch that only ran in plan mode recorded no choice).
    #[test]
    fn recorded_tools_replay_the_branch_outside_plan_mode() {
        let sys = |added: &[&str], removed: &[&str]| {
            let names = |v: &[&str]| v.iter().map(|n| json!({"name": n})).collect::<Vec<_>>();
            json!({"type": "message", "message": {"role": "system", "content": "",
                "toolsAdded": names(added), "toolsRemoved": names(removed)}})
        };
        let plan = |on: bool| json!({"type": "custom", "customType": "plan-mode", "data": {"enabled": on}});
        let first = sys(&["read", "bash", "edit", "write", "todo", "ext"], &[]);
        let r = RecordedTools::of_branch(&[first.clone(), sys(&["ls"], &["bash", "ext"])]).unwrap();
        assert_eq!(r.current, ["read", "edit", "write", "todo", "ls"]);
        let kept: Vec<&str> = [
            "read", "bash", "edit", "write", "grep", "find", "ls", "todo", "ext", "new",
        ]
        .into_iter()
        .filter(|n| r.keeps(n))
        .collect();
        assert_eq!(kept, ["read", "edit", "write", "ls", "todo", "new"]);
        // Plan mode's filtered set (edit, write removed) is skipped; so is a plan started
        // before any other run.
        let planned = [
            first.clone(),
            plan(true),
            sys(&[], &["edit", "write"]),
            plan(false),
            sys(&["edit", "write"], &[]),
            plan(true),
            sys(&[], &["edit", "write"]),
        ];
        let r = RecordedTools::of_branch(&planned).unwrap();
        assert_eq!(r.current, ["read", "bash", "edit", "write", "todo", "ext"]);
        assert_eq!(RecordedTools::of_branch(&[plan(true), first.clone()]), None);
        assert_eq!(RecordedTools::of_branch(&[]), None);
    }

    /// A `plan-mode` entry turning plan mode on with Pi's `toolsBeforePlanMode` sets the
    /// loadout to that list (Pi's example restores it when the plan is left), also on a branch
    /// whose only system messages were stored in plan mode; a later system message outside
    /// plan mode applies on top as usual.
    #[test]
    fn tools_before_plan_mode_is_the_loadout_the_plan_leaves_to() {
        let sys = |added: &[&str], removed: &[&str]| {
            let names = |v: &[&str]| v.iter().map(|n| json!({"name": n})).collect::<Vec<_>>();
            json!({"type": "message", "message": {"role": "system", "content": "",
                "toolsAdded": names(added), "toolsRemoved": names(removed)}})
        };
        let on = json!({"type": "custom", "customType": "plan-mode", "data": {"enabled": true,
            "toolsBeforePlanMode": ["read", "bash", "edit", "write", "ls"]}});
        let off = json!({"type": "custom", "customType": "plan-mode", "data": {"enabled": false}});
        let r =
            RecordedTools::of_branch(&[on.clone(), sys(&["read", "bash", "ls"], &[]), off.clone()])
                .unwrap();
        assert_eq!(r.current, ["read", "bash", "edit", "write", "ls"]);
        let kept: Vec<&str> = [
            "read", "bash", "edit", "write", "grep", "find", "ls", "todo",
        ]
        .into_iter()
        .filter(|n| r.keeps(n))
        .collect();
        assert_eq!(kept, ["read", "bash", "edit", "write", "ls", "todo"]);
        let r = RecordedTools::of_branch(&[on, off, sys(&["grep"], &["bash"])]).unwrap();
        assert_eq!(r.current, ["read", "edit", "write", "ls", "grep"]);
    }

    /// Pi 1.6's default thinking level: `medium` clamped to the model (`off` without
    /// reasoning, the next supported level up when `medium` is mapped to `null`);
    /// `modelThinkingLevels` for a new session, never for a resumed one.
    #[test]
    fn default_thinking_level_is_medium_clamped_to_the_model() {
        let mut plain = Model::new(pi_ai::models::Api::OpenaiCompletions, "mock", "m", "");
        let settings = crate::settings::Settings::default();
        assert_eq!(
            resumed_thinking_level(&settings, &plain),
            ThinkingLevel::Off
        );
        plain.reasoning = true;
        assert_eq!(
            resumed_thinking_level(&settings, &plain),
            ThinkingLevel::Medium
        );
        plain.thinking_level_map = Some(json!({"medium": null, "minimal": null}));
        assert_eq!(
            resumed_thinking_level(&settings, &plain),
            ThinkingLevel::High
        );
        let mut merged = serde_json::Map::new();
        merged.insert("modelThinkingLevels".into(), json!({"mock/m": "low"}));
        merged.insert("defaultThinkingLevel".into(), json!("minimal"));
        let settings = crate::settings::Settings::from_merged(merged, Vec::new());
        assert_eq!(
            model_thinking_level(&settings, &plain),
            Some(ThinkingLevel::Low)
        );
        assert_eq!(
            resumed_thinking_level(&settings, &plain),
            ThinkingLevel::Low
        );
    }
}

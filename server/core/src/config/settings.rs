//! Pi-format `settings.json`: one loader for every setting pi-lsp uses.
//!
//! Two files (Pi `docs/settings.md`): the global `<agent dir>/settings.json` (agent dir =
//! `$PI_CODING_AGENT_DIR`, else `~/.pi/agent`) and the project `<workspace>/.pi/settings.json`,
//! read only for a trusted workspace (see [`crate::resources::WorkspaceConfig`]). Each file is
//! migrated as Pi's `SettingsManager.migrateSettings` does (`queueMode` → `steeringMode`, the
//! old `skills` object, `retry.maxDelayMs` → `retry.provider.maxRetryDelayMs`), then the project
//! file is merged over the global one as Pi's `deepMergeSettings` does: a key of the project
//! file replaces the global one, except that when both values are objects they are merged one
//! level deep (`{...global.compaction, ...project.compaction}`); arrays are replaced, never
//! concatenated.
//!
//! Path-valued keys (`allowedDirs`, `skills`, `prompts`) are resolved against the folder of the
//! file that names them (`~` expanded; relative paths against `<agent dir>` for the global file
//! and against `<workspace>/.pi` for the project file, as Pi resolves resource paths) before the
//! merge, so the merged value holds absolute paths.
//!
//! Keys pi-lsp does not type (`sandbox`, extensions' own keys, Pi's UI keys) stay available as
//! raw JSON in [`Settings::merged`].
//!
//! A missing file counts as `{}`; a file that is not a JSON object is skipped with a warning in
//! [`Settings::warnings`] (Pi records the error and goes on with `{}` too); a typed key with a
//! value of the wrong type or an unknown enum value keeps its default and adds a warning.
//!
//! [`SettingsCache`] keeps the loaded value and reloads it only when one of the two files
//! changed (modification time, length or existence), so callers may ask for it on every prompt:
//! two `stat` calls when nothing changed.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::Mutex;
use std::time::{Duration, SystemTime};

use pi_ai::models::ThinkingLevel;
use pi_ai::RetryPolicy;
use serde_json::{Map, Value};

pub use crate::config::types::ApprovalPolicy;
use crate::config::types::{QueueMode, RetrySettings};

/// Pi's `compaction` settings (defaults from Pi `docs/settings.md`): the type the loop uses.
pub use crate::config::types::CompactionSettings;

/// Pi's `retry` settings (defaults from Pi `docs/settings.md`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryConfig {
    /// `retry.enabled` (default `true`).
    pub enabled: bool,
    /// `retry.maxRetries`: retries after the first attempt (default 3).
    pub max_retries: u32,
    /// `retry.baseDelayMs`: first backoff delay in milliseconds, doubled per retry (default 2,000).
    pub base_delay_ms: u64,
    /// `retry.provider.timeoutMs`: the longest wait for a response's headers and the longest
    /// silence inside its body, in milliseconds (`None` or 0 = the model layer's defaults).
    pub provider_timeout_ms: Option<u64>,
    /// `retry.provider.maxRetries`: retries inside the provider client (`None` = the client's).
    pub provider_max_retries: Option<u32>,
    /// `retry.provider.maxRetryDelayMs`: the longest delay (computed or server-requested) worth
    /// waiting, in milliseconds; longer ones fail at once (default 60,000; 0 = no cap).
    pub max_retry_delay_ms: u64,
}

impl Default for RetryConfig {
    fn default() -> Self {
        RetryConfig {
            enabled: true,
            max_retries: 3,
            base_delay_ms: 2_000,
            provider_timeout_ms: None,
            provider_max_retries: None,
            max_retry_delay_ms: 60_000,
        }
    }
}

impl RetryConfig {
    /// The agent loop's retry settings: `enabled`, and a [`RetryPolicy`] with these counts and
    /// delays, without jitter: Pi 1.6's `retryDelayMs` (`pi-ai/dist/utils/retry.js`) waits
    /// exactly `baseDelayMs · 2^(n-1)`, the `delayMs` its `auto_retry_start` says.
    pub fn to_retry_settings(&self) -> RetrySettings {
        let max_delay = if self.max_retry_delay_ms == 0 {
            Duration::MAX
        } else {
            Duration::from_millis(self.max_retry_delay_ms)
        };
        RetrySettings {
            enabled: self.enabled,
            policy: RetryPolicy {
                max_retries: self.max_retries,
                base_delay: Duration::from_millis(self.base_delay_ms),
                max_delay,
                jitter: 0.0,
            },
            provider_timeout: self
                .provider_timeout_ms
                .filter(|ms| *ms > 0)
                .map(Duration::from_millis),
        }
    }
}

/// The merged settings of one workspace, typed where pi-lsp uses them.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    /// `defaultProvider`, e.g. `anthropic`.
    pub default_provider: Option<String>,
    /// `defaultModel`: a model id of the default provider.
    pub default_model: Option<String>,
    /// `defaultThinkingLevel`.
    pub default_thinking_level: Option<ThinkingLevel>,
    /// `thinkingBudgets` (`{minimal, low, medium, high}`, tokens): the budgets a
    /// budget-based thinking request asks for (Pi 1.6's `getThinkingBudgets`, passed to every
    /// agent request as pi-ai's `thinkingBudgets`; not to summary requests). Unset levels keep
    /// Pi's defaults.
    pub thinking_budgets: pi_ai::models::ThinkingBudgets,
    /// `compaction`.
    pub compaction: CompactionSettings,
    /// `branchSummary.reserveTokens`: tokens of the context window a branch summary leaves
    /// for its prompt and answer (Pi 1.6's default 16,384); the branch left is summarised
    /// within the window less these.
    pub branch_summary_reserve_tokens: u64,
    /// `retry`.
    pub retry: RetryConfig,
    /// `steeringMode`: `"one-at-a-time"` (default) or `"all"`.
    pub steering_mode: QueueMode,
    /// `followUpMode`: `"one-at-a-time"` (default) or `"all"`.
    pub follow_up_mode: QueueMode,
    /// `approvalPolicy` (pi-lsp's key); `None` when not set.
    pub approval_policy: Option<ApprovalPolicy>,
    /// `saveUserChanges` (pi-lsp's key: `ask` / `always` / `never`, see
    /// [`crate::unsaved::SaveUserChanges`]); `None` when not set.
    pub save_user_changes: Option<crate::unsaved::SaveUserChanges>,
    /// `allowedDirs`: folders outside the workspace the file tools may use (absolute,
    /// canonical when they exist).
    pub allowed_dirs: Vec<PathBuf>,
    /// `skills`: extra skill files or folders (absolute), per file. Unlike the merged keys,
    /// both files' entries apply (Pi's package manager reads each file's array).
    pub skill_paths: ScopedPaths,
    /// `prompts`: extra prompt-template files or folders (absolute), per file.
    pub prompt_paths: ScopedPaths,
    /// `enableSkillCommands`: `/skill:name` expands (default `true`).
    pub enable_skill_commands: bool,
    /// The whole merged object, for keys not typed here (e.g. `sandbox`, extensions' keys).
    pub merged: Map<String, Value>,
    /// Problems met while loading (unreadable files, wrong types), for the user to see.
    pub warnings: Vec<String>,
}

impl Settings {
    /// `images.autoResize` (Pi 1.6: "Resize images to at most 2000 by 2000 pixels before
    /// sending them", default `true`): a prompt's images are fitted as `read` fits its own.
    pub fn image_auto_resize(&self) -> bool {
        self.merged
            .get("images")
            .and_then(|i| i.get("autoResize"))
            .and_then(Value::as_bool)
            .unwrap_or(true)
    }

    /// `images.blockImages` (Pi 1.6: "Prevent images from being sent to models", default
    /// `false`): every image of a user message or tool result goes to the model as the text
    /// [`crate::agent::IMAGE_BLOCKED_TEXT`] instead (Pi 1.6's `convertToLlm` wrapper in
    /// `core/sdk.js`); the session keeps the images.
    pub fn block_images(&self) -> bool {
        self.merged
            .get("images")
            .and_then(|i| i.get("blockImages"))
            .and_then(Value::as_bool)
            .unwrap_or(false)
    }
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            default_provider: None,
            default_model: None,
            default_thinking_level: None,
            thinking_budgets: pi_ai::models::ThinkingBudgets::default(),
            compaction: CompactionSettings::default(),
            branch_summary_reserve_tokens: crate::config::types::DEFAULT_RESERVE_TOKENS,
            retry: RetryConfig::default(),
            steering_mode: QueueMode::OneAtATime,
            follow_up_mode: QueueMode::OneAtATime,
            approval_policy: None,
            save_user_changes: None,
            allowed_dirs: Vec::new(),
            skill_paths: ScopedPaths::default(),
            prompt_paths: ScopedPaths::default(),
            enable_skill_commands: true,
            merged: Map::new(),
            warnings: Vec::new(),
        }
    }
}

/// Paths named by the global and by the project settings file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ScopedPaths {
    pub project: Vec<PathBuf>,
    pub global: Vec<PathBuf>,
}

/// The absolute paths of one file's `key` array (after [`absolutize_paths`]).
fn string_paths(m: &Map<String, Value>, key: &str) -> Vec<PathBuf> {
    m.get(key)
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(PathBuf::from)
        .collect()
}

/// Where settings come from: the global file (if any agent dir) and the project file (only
/// for a trusted workspace).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SettingsFiles {
    /// `<agent dir>/settings.json`.
    pub global: Option<PathBuf>,
    /// `<workspace>/.pi/settings.json`, `None` for an untrusted workspace.
    pub project: Option<PathBuf>,
}

impl SettingsFiles {
    /// The files for `workspace`: the project file only when `trusted`.
    pub fn new(agent_dir: Option<&Path>, workspace: &Path, trusted: bool) -> Self {
        SettingsFiles {
            global: agent_dir.map(|d| d.join("settings.json")),
            project: trusted.then(|| workspace.join(".pi").join("settings.json")),
        }
    }
}

/// Pi's `deepMergeSettings(base, overrides)`: override keys win; two objects merge one level.
pub fn merge_settings(
    base: &Map<String, Value>,
    overrides: &Map<String, Value>,
) -> Map<String, Value> {
    let mut out = base.clone();
    for (k, v) in overrides {
        match (out.get_mut(k), v) {
            (Some(Value::Object(b)), Value::Object(o)) => {
                for (nk, nv) in o {
                    b.insert(nk.clone(), nv.clone());
                }
            }
            _ => {
                out.insert(k.clone(), v.clone());
            }
        }
    }
    out
}

/// Pi's `migrateSettings`, applied to one file's object.
pub fn migrate_settings(s: &mut Map<String, Value>) {
    if !s.contains_key("steeringMode") {
        if let Some(q) = s.remove("queueMode") {
            s.insert("steeringMode".into(), q);
        }
    }
    if let Some(Value::Object(old)) = s.get("skills").cloned() {
        if !s.contains_key("enableSkillCommands") {
            if let Some(e) = old.get("enableSkillCommands") {
                s.insert("enableSkillCommands".into(), e.clone());
            }
        }
        match old.get("customDirectories") {
            Some(Value::Array(dirs)) if !dirs.is_empty() => {
                s.insert("skills".into(), Value::Array(dirs.clone()));
            }
            _ => {
                s.remove("skills");
            }
        }
    }
    if let Some(Value::Object(retry)) = s.get_mut("retry") {
        if let Some(max) = retry.remove("maxDelayMs") {
            if max.is_number() {
                let provider = retry
                    .entry("provider")
                    .or_insert_with(|| Value::Object(Map::new()));
                if !provider.is_object() {
                    *provider = Value::Object(Map::new());
                }
                if let Value::Object(p) = provider {
                    if p.get("maxRetryDelayMs").is_none_or(Value::is_null) {
                        p.insert("maxRetryDelayMs".into(), max);
                    }
                }
            }
        }
    }
}

/// `~`, `~/…` expanded with `$HOME`; relative paths joined to `base`.
pub fn resolve_setting_path(input: &str, base: &Path) -> PathBuf {
    let t = input.trim();
    let home = || {
        std::env::var_os("HOME")
            .map(PathBuf::from)
            .unwrap_or_default()
    };
    let p = if t == "~" {
        home()
    } else if let Some(rest) = t.strip_prefix("~/") {
        home().join(rest)
    } else {
        PathBuf::from(t)
    };
    if p.is_absolute() {
        p
    } else {
        base.join(p)
    }
}

/// Rewrites the path arrays of one file's object to absolute paths against `base`. Entries
/// that are not strings are dropped with a warning.
fn absolutize_paths(
    s: &mut Map<String, Value>,
    base: &Path,
    file: &Path,
    warnings: &mut Vec<String>,
) {
    for key in ["allowedDirs", "skills", "prompts"] {
        let Some(v) = s.get_mut(key) else { continue };
        let Value::Array(items) = v else {
            warnings.push(format!(
                "{}: {key} must be an array of paths",
                file.display()
            ));
            s.remove(key);
            continue;
        };
        let mut out = Vec::new();
        for item in items.iter() {
            match item.as_str() {
                Some(p) => out.push(Value::String(
                    resolve_setting_path(p, base).to_string_lossy().into_owned(),
                )),
                None => warnings.push(format!("{}: {key}: {item} is not a path", file.display())),
            }
        }
        *v = Value::Array(out);
    }
}

/// Reads one settings file: `Ok(None)` when absent, `Err(message)` when unreadable or not a
/// JSON object.
fn read_file(path: &Path) -> Result<Option<Map<String, Value>>, String> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("cannot read {}: {e}", path.display())),
    };
    match serde_json::from_str::<Value>(&text) {
        Ok(Value::Object(m)) => Ok(Some(m)),
        Ok(_) => Err(format!(
            "{}: settings must be a JSON object; file ignored",
            path.display()
        )),
        Err(e) => Err(format!(
            "{}: not valid JSON ({e}); file ignored",
            path.display()
        )),
    }
}

impl Settings {
    /// Loads and merges `files` (project over global). Never fails: problems become
    /// [`Settings::warnings`].
    pub fn load(files: &SettingsFiles) -> Settings {
        let mut warnings = Vec::new();
        let mut merged = Map::new();
        let mut skills = ScopedPaths::default();
        let mut prompts = ScopedPaths::default();
        for (path, is_project) in [(&files.global, false), (&files.project, true)] {
            let Some(path) = path else { continue };
            match read_file(path) {
                Ok(Some(mut m)) => {
                    migrate_settings(&mut m);
                    let base = path.parent().unwrap_or(Path::new("."));
                    absolutize_paths(&mut m, base, path, &mut warnings);
                    let (s, p) = (string_paths(&m, "skills"), string_paths(&m, "prompts"));
                    if is_project {
                        (skills.project, prompts.project) = (s, p);
                    } else {
                        (skills.global, prompts.global) = (s, p);
                    }
                    merged = merge_settings(&merged, &m);
                }
                Ok(None) => {}
                Err(e) => warnings.push(e),
            }
        }
        let mut s = Settings::from_merged(merged, warnings);
        s.skill_paths = skills;
        s.prompt_paths = prompts;
        s
    }

    /// Types the keys of an already merged object (paths must be absolute already; `skills`
    /// and `prompts` are per file and left empty here).
    pub fn from_merged(merged: Map<String, Value>, mut warnings: Vec<String>) -> Settings {
        let mut s = Settings::default();
        {
            let mut t = Typer {
                root: &merged,
                warnings: &mut warnings,
            };
            s.default_provider = t.string("/defaultProvider");
            s.default_model = t.string("/defaultModel");
            s.default_thinking_level = t.parsed("/defaultThinkingLevel", ThinkingLevel::parse);
            s.thinking_budgets = pi_ai::models::ThinkingBudgets {
                minimal: t.u64("/thinkingBudgets/minimal"),
                low: t.u64("/thinkingBudgets/low"),
                medium: t.u64("/thinkingBudgets/medium"),
                high: t.u64("/thinkingBudgets/high"),
            };
            if let Some(b) = t.bool("/compaction/enabled") {
                s.compaction.enabled = b;
            }
            if let Some(n) = t.u64("/compaction/reserveTokens") {
                s.compaction.reserve_tokens = n;
            }
            if let Some(n) = t.u64("/compaction/keepRecentTokens") {
                s.compaction.keep_recent_tokens = n;
            }
            if let Some(n) = t.u64("/branchSummary/reserveTokens") {
                s.branch_summary_reserve_tokens = n;
            }
            if let Some(b) = t.bool("/retry/enabled") {
                s.retry.enabled = b;
            }
            if let Some(n) = t.u64("/retry/maxRetries") {
                s.retry.max_retries = n.min(100) as u32;
            }
            if let Some(n) = t.u64("/retry/baseDelayMs") {
                s.retry.base_delay_ms = n;
            }
            s.retry.provider_timeout_ms = t.u64("/retry/provider/timeoutMs");
            s.retry.provider_max_retries = t
                .u64("/retry/provider/maxRetries")
                .map(|n| n.min(100) as u32);
            if let Some(n) = t.u64("/retry/provider/maxRetryDelayMs") {
                s.retry.max_retry_delay_ms = n;
            }
            let mode = |v: &str| match v {
                "one-at-a-time" => Some(QueueMode::OneAtATime),
                "all" => Some(QueueMode::All),
                _ => None,
            };
            if let Some(m) = t.parsed("/steeringMode", mode) {
                s.steering_mode = m;
            }
            if let Some(m) = t.parsed("/followUpMode", mode) {
                s.follow_up_mode = m;
            }
            s.approval_policy = t.parsed("/approvalPolicy", ApprovalPolicy::parse);
            s.save_user_changes =
                t.parsed("/saveUserChanges", crate::unsaved::SaveUserChanges::parse);
            if let Some(b) = t.bool("/enableSkillCommands") {
                s.enable_skill_commands = b;
            }
            s.allowed_dirs = string_paths(&merged, "allowedDirs")
                .into_iter()
                .map(|p| p.canonicalize().unwrap_or(p))
                .collect();
        }
        s.merged = merged;
        s.warnings = warnings;
        s
    }

    /// [`Settings::compaction`] for `provider/id`, as Pi 1.6's `getCompactionSettings(model)`
    /// (`dist/core/settings-manager.js`) resolves it: `reserveTokens` and `keepRecentTokens`
    /// from `compaction.modelOverrides["provider/id"]` first (keyed by the exact
    /// `provider/modelId`), then the ordinary setting, then the default. An override that is
    /// not a non-negative integer is ignored (Pi refuses it with an error).
    pub fn compaction_for(&self, provider: &str, id: &str) -> CompactionSettings {
        let mut c = self.compaction;
        let entry = self
            .merged
            .get("compaction")
            .and_then(|c| c.get("modelOverrides"))
            .and_then(|o| o.get(format!("{provider}/{id}")));
        if let Some(entry) = entry {
            if let Some(n) = entry.get("reserveTokens").and_then(Value::as_u64) {
                c.reserve_tokens = n;
            }
            if let Some(n) = entry.get("keepRecentTokens").and_then(Value::as_u64) {
                c.keep_recent_tokens = n;
            }
        }
        c
    }

    /// The raw merged value of `key` (e.g. `"sandbox"`), for settings typed elsewhere.
    pub fn raw(&self, key: &str) -> Option<&Value> {
        self.merged.get(key)
    }
}

/// Reads typed values out of the merged object, warning on wrong types.
struct Typer<'a> {
    root: &'a Map<String, Value>,
    warnings: &'a mut Vec<String>,
}

impl Typer<'_> {
    fn get(&self, pointer: &str) -> Option<&Value> {
        let mut parts = pointer.trim_start_matches('/').split('/');
        let first = parts.next()?;
        let mut v = self.root.get(first)?;
        for p in parts {
            v = v.get(p)?;
        }
        (!v.is_null()).then_some(v)
    }

    fn key(pointer: &str) -> String {
        pointer.trim_start_matches('/').replace('/', ".")
    }

    fn string(&mut self, pointer: &str) -> Option<String> {
        let v = self.get(pointer)?;
        match v.as_str() {
            Some(s) => Some(s.to_string()),
            None => {
                let w = format!("settings: {} must be a string, not {v}", Self::key(pointer));
                self.warnings.push(w);
                None
            }
        }
    }

    fn parsed<T>(&mut self, pointer: &str, parse: impl Fn(&str) -> Option<T>) -> Option<T> {
        let s = self.string(pointer)?;
        let parsed = parse(&s);
        if parsed.is_none() {
            let w = format!(
                "settings: {} has an unknown value \"{s}\"",
                Self::key(pointer)
            );
            self.warnings.push(w);
        }
        parsed
    }

    fn bool(&mut self, pointer: &str) -> Option<bool> {
        let v = self.get(pointer)?;
        match v.as_bool() {
            Some(b) => Some(b),
            None => {
                let w = format!(
                    "settings: {} must be true or false, not {v}",
                    Self::key(pointer)
                );
                self.warnings.push(w);
                None
            }
        }
    }

    fn u64(&mut self, pointer: &str) -> Option<u64> {
        let v = self.get(pointer)?;
        match v.as_u64().or_else(|| {
            v.as_f64()
                .filter(|f| f.is_finite() && *f >= 0.0)
                .map(|f| f as u64)
        }) {
            Some(n) => Some(n),
            None => {
                let w = format!(
                    "settings: {} must be a non-negative number, not {v}",
                    Self::key(pointer)
                );
                self.warnings.push(w);
                None
            }
        }
    }
}

/// What a file looked like when it was read (modification time, length): `None` = absent.
pub(crate) type Stamp = Option<(SystemTime, u64)>;

fn stamp(path: &Option<PathBuf>) -> Stamp {
    file_stamp(path.as_deref()?)
}

/// The [`Stamp`] of the file at `path` now (one `stat`).
pub(crate) fn file_stamp(path: &Path) -> Stamp {
    let m = std::fs::metadata(path).ok()?;
    Some((m.modified().unwrap_or(SystemTime::UNIX_EPOCH), m.len()))
}

/// Loaded settings and the stamps of (global, project) when they were read.
type Loaded = ((Stamp, Stamp), Arc<Settings>);

/// The settings of one workspace, loaded once and reloaded when a file changes.
///
/// [`SettingsCache::get`] stats both files (about two microseconds) and reloads only when a
/// modification time, a length or an existence changed; so asking on every prompt sees an edit
/// made just before it without a file watcher (no extra thread, nothing missed on network
/// file systems, and deterministic in tests).
#[derive(Debug)]
pub struct SettingsCache {
    files: SettingsFiles,
    loaded: Mutex<Option<Loaded>>,
}

impl SettingsCache {
    /// A cache over `files`; nothing is read until [`SettingsCache::get`].
    pub fn new(files: SettingsFiles) -> Self {
        SettingsCache {
            files,
            loaded: Mutex::new(None),
        }
    }

    /// The files this cache reads.
    pub fn files(&self) -> &SettingsFiles {
        &self.files
    }

    /// The current settings; reloads (and logs the warnings once) when a file changed.
    pub fn get(&self) -> Arc<Settings> {
        let now = (stamp(&self.files.global), stamp(&self.files.project));
        let mut slot = self.loaded.lock();
        if let Some((seen, s)) = slot.as_ref() {
            if *seen == now {
                return s.clone();
            }
        }
        let s = Arc::new(Settings::load(&self.files));
        for w in &s.warnings {
            tracing::warn!("{w}");
        }
        *slot = Some((now, s.clone()));
        s
    }
}

/// Sets `path` (object keys, outermost first, e.g. `["approvals", "bash"]`) to `value` in the
/// project file `<workspace>/.pi/settings.json`, keeping every other key and their order, and
/// creating the file and folders as needed; written to a temporary file then renamed, so a
/// reader sees the old or the new file, never half of one. Used for choices the user makes to
/// persist for the workspace (e.g. "allow always").
///
/// Errors: the existing file is not a JSON object (it is left untouched), `path` is empty or
/// crosses a value that is not an object, or the write fails.
pub fn write_project_setting(workspace: &Path, path: &[&str], value: Value) -> Result<(), String> {
    let file = workspace.join(".pi").join("settings.json");
    let mut root = match read_file(&file)? {
        Some(m) => m,
        None => Map::new(),
    };
    let Some((last, parents)) = path.split_last() else {
        return Err("empty settings path".into());
    };
    let mut cur = &mut root;
    for (i, k) in parents.iter().enumerate() {
        let slot = cur
            .entry(k.to_string())
            .or_insert_with(|| Value::Object(Map::new()));
        cur = match slot {
            Value::Object(m) => m,
            other => {
                return Err(format!(
                    "{}: {} is {other}, not an object",
                    file.display(),
                    path[..=i].join(".")
                ))
            }
        };
    }
    cur.insert(last.to_string(), value);
    let text = serde_json::to_string_pretty(&Value::Object(root)).map_err(|e| e.to_string())?;
    let dir = workspace.join(".pi");
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let tmp = dir.join(format!(".settings.json.{}.tmp", std::process::id()));
    std::fs::write(&tmp, format!("{text}\n"))
        .and_then(|()| std::fs::rename(&tmp, &file))
        .map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            format!("cannot write {}: {e}", file.display())
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(v: Value) -> Map<String, Value> {
        match v {
            Value::Object(m) => m,
            _ => panic!("not an object"),
        }
    }

    #[test]
    fn merge_is_pi_deep_merge_one_level() {
        let global = obj(
            json!({"theme": "dark", "compaction": {"enabled": true, "reserveTokens": 16384},
            "retry": {"provider": {"timeoutMs": 1, "maxRetries": 2}}, "skills": ["/a"]}),
        );
        let project = obj(json!({"compaction": {"reserveTokens": 8192},
            "retry": {"provider": {"timeoutMs": 5}}, "skills": ["/b"]}));
        assert_eq!(
            Value::Object(merge_settings(&global, &project)),
            json!({"theme": "dark", "compaction": {"enabled": true, "reserveTokens": 8192},
                "retry": {"provider": {"timeoutMs": 5}}, "skills": ["/b"]})
        );
    }

    #[test]
    fn migrations_match_pi() {
        let mut s = obj(
            json!({"queueMode": "all", "skills": {"enableSkillCommands": false,
            "customDirectories": ["~/x"]}, "retry": {"maxDelayMs": 5}}),
        );
        migrate_settings(&mut s);
        assert_eq!(
            Value::Object(s),
            json!({"skills": ["~/x"], "retry": {"provider": {"maxRetryDelayMs": 5}},
                "steeringMode": "all", "enableSkillCommands": false})
        );
    }

    /// `compaction.modelOverrides["provider/id"]` as Pi 1.6's `getCompactionSettings(model)`:
    /// the override's token settings first, then the ordinary ones, then the defaults; other
    /// models (and a wrong-typed override) keep the ordinary settings. Also `thinkingBudgets`.
    #[test]
    fn compaction_model_overrides_and_thinking_budgets() {
        let s = Settings::from_merged(
            obj(json!({
                "compaction": {"enabled": false, "reserveTokens": 9000,
                    "modelOverrides": {"t/m1": {"keepRecentTokens": 5}, "t/m2": {"reserveTokens": 100, "keepRecentTokens": "x"}}},
                "thinkingBudgets": {"high": 5000, "low": 1500}
            })),
            Vec::new(),
        );
        let c = |enabled, reserve_tokens, keep_recent_tokens| CompactionSettings {
            enabled,
            reserve_tokens,
            keep_recent_tokens,
        };
        assert_eq!(
            (
                s.compaction_for("t", "m1"),
                s.compaction_for("t", "m2"),
                s.compaction_for("t", "m3"),
                s.thinking_budgets
            ),
            (
                c(false, 9000, 5),
                c(false, 100, crate::config::types::DEFAULT_KEEP_RECENT_TOKENS),
                c(
                    false,
                    9000,
                    crate::config::types::DEFAULT_KEEP_RECENT_TOKENS
                ),
                pi_ai::models::ThinkingBudgets {
                    low: Some(1500),
                    high: Some(5000),
                    ..Default::default()
                }
            )
        );
    }

    #[test]
    fn typed_values_defaults_and_warnings() {
        let s = Settings::from_merged(
            obj(
                json!({"defaultProvider": "mock", "defaultModel": "m", "defaultThinkingLevel": "high",
                "compaction": {"enabled": false, "keepRecentTokens": 100},
                "retry": {"maxRetries": 1, "baseDelayMs": 20, "provider": {"maxRetryDelayMs": 0}},
                "steeringMode": "all", "followUpMode": "sometimes", "approvalPolicy": "auto-edit",
                "saveUserChanges": "never",
                "sandbox": {"mode": "read-only"}, "enableSkillCommands": "yes"}),
            ),
            Vec::new(),
        );
        assert_eq!(
            (
                s.default_provider.as_deref(),
                s.default_model.as_deref(),
                s.default_thinking_level
            ),
            (Some("mock"), Some("m"), Some(ThinkingLevel::High))
        );
        assert_eq!(
            s.compaction,
            CompactionSettings {
                enabled: false,
                reserve_tokens: 16_384,
                keep_recent_tokens: 100
            }
        );
        assert_eq!(
            s.retry,
            RetryConfig {
                enabled: true,
                max_retries: 1,
                base_delay_ms: 20,
                provider_timeout_ms: None,
                provider_max_retries: None,
                max_retry_delay_ms: 0
            }
        );
        let r = s.retry.to_retry_settings();
        assert_eq!(
            (
                r.policy.max_retries,
                r.policy.base_delay,
                r.policy.max_delay
            ),
            (1, Duration::from_millis(20), Duration::MAX)
        );
        assert_eq!(
            (s.steering_mode, s.follow_up_mode, s.approval_policy),
            (
                QueueMode::All,
                QueueMode::OneAtATime,
                Some(ApprovalPolicy::AutoEdit)
            )
        );
        assert_eq!(
            s.save_user_changes,
            Some(crate::unsaved::SaveUserChanges::Never)
        );
        assert_eq!(s.raw("sandbox"), Some(&json!({"mode": "read-only"})));
        assert!(s.enable_skill_commands);
        assert_eq!(
            s.warnings,
            vec![
                "settings: followUpMode has an unknown value \"sometimes\"".to_string(),
                "settings: enableSkillCommands must be true or false, not \"yes\"".to_string(),
            ]
        );
    }

    #[test]
    fn files_merge_with_paths_resolved_per_file_and_cache_reloads_on_change() {
        let dir_tmp = tempfile::tempdir().unwrap();
        let dir = dir_tmp.path().to_path_buf();
        let agent = dir.join("agent");
        let ws = dir.join("ws");
        std::fs::create_dir_all(&agent).unwrap();
        std::fs::create_dir_all(ws.join(".pi")).unwrap();
        std::fs::write(
            agent.join("settings.json"),
            r#"{"defaultProvider": "g", "defaultModel": "gm", "skills": ["sk"], "prompts": ["/abs/p"]}"#,
        )
        .unwrap();
        std::fs::write(
            ws.join(".pi/settings.json"),
            r#"{"defaultModel": "pm", "skills": ["../skills"]}"#,
        )
        .unwrap();
        let trusted = SettingsCache::new(SettingsFiles::new(Some(&agent), &ws, true));
        let s = trusted.get();
        assert_eq!(
            (s.default_provider.as_deref(), s.default_model.as_deref()),
            (Some("g"), Some("pm"))
        );
        assert_eq!(
            s.skill_paths,
            ScopedPaths {
                project: vec![ws.join(".pi/../skills")],
                global: vec![agent.join("sk")]
            }
        );
        assert_eq!(
            s.prompt_paths,
            ScopedPaths {
                project: vec![],
                global: vec![PathBuf::from("/abs/p")]
            }
        );
        assert!(
            Arc::ptr_eq(&s, &trusted.get()),
            "unchanged files are not reread"
        );

        let untrusted = Settings::load(&SettingsFiles::new(Some(&agent), &ws, false));
        assert_eq!(untrusted.default_model.as_deref(), Some("gm"));
        assert_eq!(
            untrusted.skill_paths,
            ScopedPaths {
                project: vec![],
                global: vec![agent.join("sk")]
            }
        );

        std::fs::write(
            ws.join(".pi/settings.json"),
            r#"{"defaultModel": "changed-model"}"#,
        )
        .unwrap();
        assert_eq!(
            trusted.get().default_model.as_deref(),
            Some("changed-model")
        );
        std::fs::write(ws.join(".pi/settings.json"), "[1]").unwrap();
        let broken = trusted.get();
        assert_eq!(broken.default_model.as_deref(), Some("gm"));
        assert_eq!(
            broken.warnings,
            vec![format!(
                "{}: settings must be a JSON object; file ignored",
                ws.join(".pi/settings.json").display()
            )]
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn project_setting_written_in_place_keeping_other_keys() {
        let ws_tmp = tempfile::tempdir().unwrap();
        let ws = ws_tmp.path().to_path_buf();
        write_project_setting(&ws, &["approvals", "bash"], json!(["cargo test"])).unwrap();
        std::fs::write(
            ws.join(".pi/settings.json"),
            r#"{"z": 1, "approvals": {"edit": true}, "a": 2}"#,
        )
        .unwrap();
        write_project_setting(&ws, &["approvals", "bash"], json!(["ls"])).unwrap();
        let text = std::fs::read_to_string(ws.join(".pi/settings.json")).unwrap();
        assert_eq!(
            serde_json::from_str::<Value>(&text).unwrap(),
            json!({"z": 1, "approvals": {"edit": true, "bash": ["ls"]}, "a": 2})
        );
        assert!(text.starts_with("{\n  \"z\": 1"), "{text}");
        assert_eq!(
            write_project_setting(&ws, &["a", "b"], json!(1)),
            Err(format!(
                "{}: a is 2, not an object",
                ws.join(".pi/settings.json").display()
            ))
        );
        std::fs::write(ws.join(".pi/settings.json"), "not json").unwrap();
        assert!(write_project_setting(&ws, &["x"], json!(1)).is_err());
        assert_eq!(
            std::fs::read_to_string(ws.join(".pi/settings.json")).unwrap(),
            "not json"
        );
        std::fs::remove_dir_all(&ws).unwrap();
    }
}

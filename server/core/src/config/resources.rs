//! A workspace's configuration and resources, and the project-trust rule that gates them.
//!
//! [`WorkspaceConfig`] is created once per workspace with whether the workspace is trusted
//! and answers, cheaply and on every prompt:
//! - [`WorkspaceConfig::settings`]: merged `settings.json` ([`crate::settings`]);
//! - [`WorkspaceConfig::models_files`]: the `models.json` files, project first;
//! - [`WorkspaceConfig::resources`]: context files, `SYSTEM.md` / `APPEND_SYSTEM.md`, skills
//!   ([`crate::skills`]) and prompt templates ([`crate::templates`]), read afresh each time
//!   (a few directory listings and small files) so an edit shows at the next prompt, as the
//!   previous per-run `AGENTS.md` read did.
//!
//! ## Trust
//! Project-local configuration is code-like: it picks the model and endpoint (`models.json`),
//! widens the file tools' reach (`allowedDirs`), replaces the system prompt (`SYSTEM.md`) and
//! adds instructions the user never typed (templates, skills). It is read only when the
//! workspace is trusted; an untrusted workspace is configured by the user's global files
//! alone. Gated (project side only): `.pi/settings.json`, `.pi/models.json`,
//! `.pi/prompts/`, `.pi/skills/`, `.agents/skills/` of the workspace and its ancestors,
//! `.pi/SYSTEM.md`, `.pi/APPEND_SYSTEM.md`, and extensions' project settings (which live in
//! `.pi/settings.json`; extensions ask [`WorkspaceConfig::trusted`]).
//!
//! Context files (`AGENTS.md` / `CLAUDE.md`) are loaded whatever the trust, as Pi loads them:
//! the global one, then one per folder from the filesystem root down to the workspace. They
//! are project documentation the model could equally `read`; they change what the model is
//! told, not what pi-lsp does (no endpoint, no tool reach, no hidden prompt replacement).
//! Pi 0.73.1 has no trust concept at all; this gate is pi-lsp's.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Serialize;

pub use crate::config::frontmatter::{parse_frontmatter, Scope};
use crate::settings::{ScopedPaths, Settings, SettingsCache, SettingsFiles};
use crate::skills::{ancestor_agents_skill_dirs, collect_skill_files, load_skill, DirMode, Skill};
use crate::templates::{load_template, PromptTemplate};

/// One context file (`AGENTS.md` or `CLAUDE.md`) and its text.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ContextFile {
    pub path: PathBuf,
    pub content: String,
}

/// The first of `AGENTS.md`, `AGENTS.MD`, `CLAUDE.md`, `CLAUDE.MD` in `dir` that reads.
fn context_file_in(dir: &Path) -> Option<ContextFile> {
    ["AGENTS.md", "AGENTS.MD", "CLAUDE.md", "CLAUDE.MD"]
        .iter()
        .map(|n| dir.join(n))
        .filter(|p| p.exists())
        .find_map(|path| match std::fs::read_to_string(&path) {
            Ok(content) => Some(ContextFile { path, content }),
            Err(e) => {
                tracing::warn!("could not read {}: {e}", path.display());
                None
            }
        })
}

/// Pi's `loadProjectContextFiles`: the agent dir's file, then one per folder from `/` down to
/// `cwd` (a file already taken is not repeated).
pub fn load_context_files(cwd: &Path, agent_dir: Option<&Path>) -> Vec<ContextFile> {
    let mut out = Vec::new();
    if let Some(g) = agent_dir.and_then(context_file_in) {
        out.push(g);
    }
    let mut ancestors: Vec<ContextFile> = cwd
        .ancestors()
        .filter_map(context_file_in)
        .filter(|f| out.first().is_none_or(|g| g.path != f.path))
        .collect();
    ancestors.reverse();
    out.extend(ancestors);
    out
}

/// Everything read from a workspace's prompt-related files for one prompt.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Resources {
    /// Context files, global first, then root → workspace.
    pub context_files: Vec<ContextFile>,
    /// `SYSTEM.md` text (project's when trusted, else the agent dir's): replaces the default
    /// system prompt text.
    pub system_prompt: Option<String>,
    /// `APPEND_SYSTEM.md` text (same lookup): appended to the system prompt.
    pub append_system_prompt: Option<String>,
    /// Skills, in precedence order (project before user).
    pub skills: Vec<Skill>,
    /// Prompt templates, in precedence order (project before user), one per name.
    pub prompt_templates: Vec<PromptTemplate>,
    /// Problems met (skipped skills, name clashes), for logs.
    pub warnings: Vec<String>,
}

impl Resources {
    /// Expands what the user typed as Pi's `prompt()` does: `/skill:name args` first, then a
    /// prompt template `/name args`. Text that names neither is returned unchanged. A skill
    /// whose file vanished leaves the text unchanged and logs why.
    pub fn expand(&self, text: &str, skill_commands: bool) -> String {
        let mut t = text.to_string();
        if skill_commands {
            match crate::skills::expand_skill_command(&t, &self.skills) {
                Some(Ok(expanded)) => t = expanded,
                Some(Err(e)) => tracing::warn!("{e}"),
                None => {}
            }
        }
        crate::templates::expand_template(&t, &self.prompt_templates).unwrap_or(t)
    }
}

/// One workspace's configuration sources and trust. Cheap to share (`Arc`).
#[derive(Debug)]
pub struct WorkspaceConfig {
    root: PathBuf,
    agent_dir: Option<PathBuf>,
    trusted: bool,
    settings: SettingsCache,
    /// The other folders of a multi-root workspace (see [`WorkspaceConfig::folders`]).
    folders: Arc<std::sync::RwLock<Vec<PathBuf>>>,
    /// What the command line sets for this process (see [`RunOverrides`]).
    overrides: RunOverrides,
}

/// What Pi 1.6's command line sets for one process (`pi-lsp run`'s flags, Pi's
/// `docs/cli.md` "Tools" and "Prompts and process"), over the workspace's files and settings.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunOverrides {
    /// `--system-prompt`: replaces `SYSTEM.md` (project or global) as the prompt's custom text
    /// (already read when it named a file; [`resolve_prompt_input`]).
    pub system_prompt: Option<String>,
    /// `--append-system-prompt`, each occurrence in order (already read when it named a file):
    /// when any is given they replace `APPEND_SYSTEM.md`, joined with blank lines (Pi's
    /// `agent-session.js`).
    pub append_system_prompt: Vec<String>,
    /// `--tools`: an allowlist of names or `*` patterns, or only `+name` / `-name` entries
    /// over the default selection ([`crate::harness::select_cli_tools`]).
    pub tools: Option<Vec<String>>,
    /// `--no-builtin-tools` (Pi 1.6's `noTools: "builtin"`): the default selection has no
    /// built-in tool (extensions', MCP and the editor's tools stay on), `tools` names or adds
    /// them back, and a resumed session's recorded tools are not restored (Pi's
    /// `usesDefaultTools` is false).
    pub no_builtin_tools: bool,
    /// The sessions folder for this process, over every other setting
    /// ([`crate::harness::sessions_dir`]); `pi-lsp run --no-session` points it at a private
    /// folder it removes.
    pub session_dir: Option<PathBuf>,
}

/// Pi's `resolvePromptInput` for `--system-prompt` / `--append-system-prompt`: the contents
/// of `input` when it names an existing file (relative to the process's folder; a leading
/// byte-order mark dropped), else `input` itself as the text. A file that exists but cannot be
/// read gives the text too, with a warning (Pi: "Could not read … file"): `(text, warning)`.
pub fn resolve_prompt_input(input: &str) -> (String, Option<String>) {
    let path = Path::new(input);
    if input.is_empty() || !path.exists() {
        return (input.to_string(), None);
    }
    match std::fs::read_to_string(path) {
        Ok(t) => (t.strip_prefix('\u{feff}').unwrap_or(&t).to_string(), None),
        Err(e) => (
            input.to_string(),
            Some(format!("could not read prompt file {input}: {e}")),
        ),
    }
}

impl WorkspaceConfig {
    /// The configuration of `root` (absolute) with the agent dir `agent_dir` (`None`: no
    /// global files) for a `trusted` or untrusted workspace. Reads nothing yet.
    pub fn new(root: PathBuf, agent_dir: Option<PathBuf>, trusted: bool) -> Self {
        let settings = SettingsCache::new(SettingsFiles::new(agent_dir.as_deref(), &root, trusted));
        WorkspaceConfig {
            root,
            agent_dir,
            trusted,
            settings,
            folders: Arc::default(),
            overrides: RunOverrides::default(),
        }
    }

    /// This configuration with the command line's `overrides`.
    pub fn with_overrides(mut self, overrides: RunOverrides) -> Self {
        self.overrides = overrides;
        self
    }

    /// What the command line set (nothing outside `pi-lsp run`).
    pub fn overrides(&self) -> &RunOverrides {
        &self.overrides
    }

    /// The workspace's folders besides the root (absolute, canonical): an editor's other
    /// `workspaceFolders` (case ED-07). Tools accept paths inside them
    /// ([`crate::tools::ToolState::folders`] shares this list, so a change applies to every
    /// session at once); sessions, settings and project files stay the root's.
    pub fn folders(&self) -> Arc<std::sync::RwLock<Vec<PathBuf>>> {
        self.folders.clone()
    }

    /// Replaces the other folders (see [`WorkspaceConfig::folders`]); the root, when listed,
    /// is left out.
    pub fn set_folders(&self, folders: Vec<PathBuf>) {
        let mut unique: Vec<PathBuf> = Vec::new();
        for f in folders {
            if f != self.root && !unique.contains(&f) {
                unique.push(f);
            }
        }
        let folders = unique;
        if let Ok(mut f) = self.folders.write() {
            *f = folders;
        }
    }

    /// [`WorkspaceConfig::new`] with Pi's agent dir ([`pi_ai::models::agent_dir`]).
    pub fn with_default_agent_dir(root: PathBuf, trusted: bool) -> Arc<Self> {
        Arc::new(WorkspaceConfig::new(
            root,
            pi_ai::models::agent_dir(),
            trusted,
        ))
    }

    /// [`WorkspaceConfig::with_default_agent_dir`] trusted as Pi 1.6 decides
    /// ([`crate::trust::resolve_project_trust`]: `front_door`'s answer — a flag, the editor's
    /// workspace trust — else Pi's `trust.json`, else `defaultProjectTrust`), with the
    /// decision (its `warning` is for the user).
    pub fn with_project_trust(
        root: PathBuf,
        front_door: Option<bool>,
    ) -> (Arc<Self>, crate::trust::TrustDecision) {
        let agent_dir = pi_ai::models::agent_dir();
        let d = crate::trust::resolve_project_trust(&root, agent_dir.as_deref(), front_door);
        if let Some(w) = &d.warning {
            tracing::warn!("{w}");
        }
        tracing::info!(
            "project trust of {}: {} ({:?})",
            root.display(),
            d.trusted,
            d.source
        );
        let ws = Arc::new(WorkspaceConfig::new(root, agent_dir, d.trusted));
        (ws, d)
    }

    /// The workspace folder.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The global agent dir, if any.
    pub fn agent_dir(&self) -> Option<&Path> {
        self.agent_dir.as_deref()
    }

    /// Whether project-local configuration is loaded.
    pub fn trusted(&self) -> bool {
        self.trusted
    }

    /// `<workspace>/.pi`.
    pub fn project_dir(&self) -> PathBuf {
        self.root.join(".pi")
    }

    /// The merged settings (reloaded only when a settings file changed).
    pub fn settings(&self) -> Arc<Settings> {
        self.settings.get()
    }

    /// The [`crate::settings::Stamp`]s of every file the system prompt's instructions may come
    /// from, found or not: each context file name in the agent dir and in every folder from
    /// `/` down to the workspace ([`load_context_files`]), and `SYSTEM.md` / `APPEND_SYSTEM.md`
    /// in the project dir (trusted only) and the agent dir. Equal stamps: those files read
    /// the same (a file made, removed, or written since changes its stamp). One `stat` each.
    pub(crate) fn prompt_files_stamp(&self) -> Vec<crate::settings::Stamp> {
        const CONTEXT: [&str; 4] = ["AGENTS.md", "AGENTS.MD", "CLAUDE.md", "CLAUDE.MD"];
        let project = self.trusted.then(|| self.project_dir());
        let dirs = self
            .agent_dir
            .iter()
            .map(PathBuf::as_path)
            .chain(self.root.ancestors());
        let context = dirs.flat_map(|d| CONTEXT.map(|n| d.join(n)));
        let system = [project.as_deref(), self.agent_dir.as_deref()]
            .into_iter()
            .flatten()
            .flat_map(|d| ["SYSTEM.md", "APPEND_SYSTEM.md"].map(|n| d.join(n)));
        context
            .chain(system)
            .map(|p| crate::settings::file_stamp(&p))
            .collect()
    }

    /// The `models.json` files in precedence order: the project's (trusted only), then the
    /// agent dir's.
    pub fn models_files(&self) -> Vec<PathBuf> {
        let mut v = Vec::new();
        if self.trusted {
            v.push(self.project_dir().join("models.json"));
        }
        if let Some(a) = &self.agent_dir {
            v.push(a.join("models.json"));
        }
        v
    }

    /// Project configuration files and folders that exist but are ignored because the
    /// workspace is untrusted (empty when trusted), for telling the user.
    pub fn ignored_project_files(&self) -> Vec<PathBuf> {
        if self.trusted {
            return Vec::new();
        }
        let p = self.project_dir();
        let mut v: Vec<PathBuf> = [
            "settings.json",
            "models.json",
            "prompts",
            "skills",
            "SYSTEM.md",
            "APPEND_SYSTEM.md",
        ]
        .iter()
        .map(|n| p.join(n))
        .collect();
        v.extend(ancestor_agents_skill_dirs(&self.root));
        v.retain(|f| f.exists());
        v
    }

    /// `name` in the project dir (trusted only), else in the agent dir, if it exists.
    fn discover(&self, name: &str) -> Option<PathBuf> {
        let project = self.trusted.then(|| self.project_dir().join(name));
        let global = self.agent_dir.as_ref().map(|a| a.join(name));
        [project, global].into_iter().flatten().find(|p| p.exists())
    }

    /// Reads the context files, `SYSTEM.md` / `APPEND_SYSTEM.md`, skills and templates now.
    pub fn resources(&self) -> Resources {
        let settings = self.settings();
        let mut r = Resources {
            context_files: load_context_files(&self.root, self.agent_dir.as_deref()),
            ..Resources::default()
        };
        let read = |p: PathBuf, warnings: &mut Vec<String>| match std::fs::read_to_string(&p) {
            Ok(t) => Some(t),
            Err(e) => {
                warnings.push(format!("could not read {}: {e}", p.display()));
                None
            }
        };
        // Pi's `DefaultResourceLoader`: a command-line prompt replaces the discovered file.
        r.system_prompt = match &self.overrides.system_prompt {
            Some(text) => Some(text.clone()),
            None => self
                .discover("SYSTEM.md")
                .and_then(|p| read(p, &mut r.warnings)),
        };
        r.append_system_prompt = if self.overrides.append_system_prompt.is_empty() {
            self.discover("APPEND_SYSTEM.md")
                .and_then(|p| read(p, &mut r.warnings))
        } else {
            Some(self.overrides.append_system_prompt.join("\n\n"))
        };
        self.load_skills(&settings.skill_paths, &mut r);
        self.load_templates(&settings.prompt_paths, &mut r);
        r
    }

    /// Skills in Pi's precedence: project settings entries, project folders, global settings
    /// entries, global folders.
    fn load_skills(&self, paths: &ScopedPaths, r: &mut Resources) {
        let mut files: Vec<(PathBuf, Scope)> = Vec::new();
        let push_dir =
            |dir: &Path, mode: DirMode, scope: Scope, files: &mut Vec<(PathBuf, Scope)>| {
                files.extend(
                    collect_skill_files(dir, mode)
                        .into_iter()
                        .map(|f| (f, scope)),
                );
            };
        let settings_entry =
            |p: &Path, scope: Scope, files: &mut Vec<(PathBuf, Scope)>, w: &mut Vec<String>| {
                if p.is_dir() {
                    files.extend(
                        collect_skill_files(p, DirMode::Pi)
                            .into_iter()
                            .map(|f| (f, scope)),
                    );
                } else if p.is_file() && p.extension().is_some_and(|e| e == "md") {
                    files.push((p.to_path_buf(), scope));
                } else if !p.exists() {
                    w.push(format!("skill path does not exist: {}", p.display()));
                }
            };
        for p in &paths.project {
            settings_entry(p, Scope::Path, &mut files, &mut r.warnings);
        }
        if self.trusted {
            push_dir(
                &self.project_dir().join("skills"),
                DirMode::Pi,
                Scope::Project,
                &mut files,
            );
            let user_agents = home_agents_skills();
            for d in ancestor_agents_skill_dirs(&self.root) {
                if Some(&d) != user_agents.as_ref() {
                    push_dir(&d, DirMode::Agents, Scope::Project, &mut files);
                }
            }
        }
        for p in &paths.global {
            settings_entry(p, Scope::Path, &mut files, &mut r.warnings);
        }
        if let Some(a) = &self.agent_dir {
            push_dir(&a.join("skills"), DirMode::Pi, Scope::User, &mut files);
        }
        if let Some(h) = home_agents_skills() {
            push_dir(&h, DirMode::Agents, Scope::User, &mut files);
        }
        let mut seen_files = std::collections::HashSet::new();
        for (f, scope) in files {
            let real = f.canonicalize().unwrap_or_else(|_| f.clone());
            if !seen_files.insert(real) {
                continue;
            }
            let (skill, warnings) = load_skill(&f, scope);
            r.warnings.extend(warnings);
            let Some(skill) = skill else { continue };
            match r.skills.iter().find(|s| s.name == skill.name) {
                Some(winner) => r.warnings.push(format!(
                    "skill \"{}\" in {} ignored: {} has the same name",
                    skill.name,
                    skill.file_path.display(),
                    winner.file_path.display()
                )),
                None => r.skills.push(skill),
            }
        }
    }

    /// Templates in Pi's precedence: project settings entries, project folder, global
    /// settings entries, global folder.
    fn load_templates(&self, paths: &ScopedPaths, r: &mut Resources) {
        let mut files: Vec<(PathBuf, Scope)> = Vec::new();
        let settings_entry = |p: &Path, files: &mut Vec<(PathBuf, Scope)>, w: &mut Vec<String>| {
            if p.is_dir() {
                files.extend(md_files_recursive(p).into_iter().map(|f| (f, Scope::Path)));
            } else if p.is_file() && p.extension().is_some_and(|e| e == "md") {
                files.push((p.to_path_buf(), Scope::Path));
            } else if !p.exists() {
                w.push(format!(
                    "prompt template path does not exist: {}",
                    p.display()
                ));
            }
        };
        for p in &paths.project {
            settings_entry(p, &mut files, &mut r.warnings);
        }
        if self.trusted {
            files.extend(
                md_files_flat(&self.project_dir().join("prompts"))
                    .into_iter()
                    .map(|f| (f, Scope::Project)),
            );
        }
        for p in &paths.global {
            settings_entry(p, &mut files, &mut r.warnings);
        }
        if let Some(a) = &self.agent_dir {
            files.extend(
                md_files_flat(&a.join("prompts"))
                    .into_iter()
                    .map(|f| (f, Scope::User)),
            );
        }
        let mut seen_files = std::collections::HashSet::new();
        for (f, scope) in files {
            let real = f.canonicalize().unwrap_or_else(|_| f.clone());
            if !seen_files.insert(real) {
                continue;
            }
            let Some(t) = load_template(&f, scope) else {
                r.warnings
                    .push(format!("could not read prompt template {}", f.display()));
                continue;
            };
            match r.prompt_templates.iter().find(|x| x.name == t.name) {
                Some(winner) => r.warnings.push(format!(
                    "prompt template \"/{}\" in {} ignored: {} has the same name",
                    t.name,
                    t.file_path.display(),
                    winner.file_path.display()
                )),
                None => r.prompt_templates.push(t),
            }
        }
    }
}

/// `~/.agents/skills`.
fn home_agents_skills() -> Option<PathBuf> {
    std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(|h| PathBuf::from(h).join(".agents").join("skills"))
}

/// The `.md` files directly in `dir` (symlinks followed; dot entries skipped), in OS order.
fn md_files_flat(dir: &Path) -> Vec<PathBuf> {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    rd.flatten()
        .filter(|e| {
            let n = e.file_name();
            let n = n.to_string_lossy();
            !n.starts_with('.') && n != "node_modules" && n.ends_with(".md")
        })
        .map(|e| e.path())
        .filter(|p| p.is_file())
        .collect()
}

/// The `.md` files under `dir`, recursively (dot entries and `node_modules` skipped).
fn md_files_recursive(dir: &Path) -> Vec<PathBuf> {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for e in rd.flatten() {
        let n = e.file_name().to_string_lossy().into_owned();
        if n.starts_with('.') || n == "node_modules" {
            continue;
        }
        let p = e.path();
        if p.is_dir() {
            out.extend(md_files_recursive(&p));
        } else if p.is_file() && n.ends_with(".md") {
            out.push(p);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use serde_json::Value;

    #[test]
    fn frontmatter_as_pi() {
        let (fm, body) = parse_frontmatter(
            "---\r\nname: x\r\ndescription: \"A: b\"\r\nflag: true\r\n---\r\n\r\nBody\r\n",
        );
        assert_eq!(
            Value::Object(fm),
            json!({"name": "x", "description": "A: b", "flag": true})
        );
        assert_eq!(body, "Body");
        let (fm, body) = parse_frontmatter("no frontmatter\n");
        assert!(fm.is_empty());
        assert_eq!(body, "no frontmatter\n");
        let (fm, body) = parse_frontmatter("---\nunterminated: 1\n");
        assert!(fm.is_empty());
        assert_eq!(body, "---\nunterminated: 1\n");
        let (fm, body) = parse_frontmatter("---\n: : bad [\n---\nrest");
        assert!(fm.is_empty());
        assert_eq!(body, "rest");
    }
}

//! The system prompt, assembled as Pi 1.6's `buildSystemPromptSections` (`core/system-prompt.js`):
//! ordered, named sections, each but the first framed as `<name>\n…\n</name>`, and the prompt
//! sent is their texts joined by blank lines (pi-ai's `getSystemMessageText` of the stored
//! system message, whose `content` is empty):
//!
//! 1. `preamble`: "You are a coding assistant running inside pi…" — or, with `SYSTEM.md` /
//!    `--system-prompt`, that text, which also leaves out the next three;
//! 2. `tools`: each active tool with a one-line snippet (a tool without one is not listed),
//!    then "Additional tools may be available.";
//! 3. `rules`: bash named for file operations only without grep/find/ls, each tool's
//!    guidelines, extra guidelines, then "Be concise…" and "Show file paths…", duplicates
//!    dropped;
//! 4. `docs`: only when [`PiDocs`] is given (Pi's own documentation; pi-lsp ships none, so it
//!    is given only when `PI_PACKAGE_DIR` names a Pi package: [`PiDocs::from_env`]);
//! 5. `addendum`: `APPEND_SYSTEM.md` / `--append-system-prompt`;
//! 6. `project_context`: every context file (global, then root → workspace) as
//!    `<project_instructions path="…">`;
//! 7. `skills`: the skills block, when `read` or `bash` is active (the hint names the first);
//! 8. `cwd`: the working directory (backslashes become `/`). No date.
//!
//! The sections are what a session stores in its system message (`sections`, by name), as Pi
//! 1.6 stores them. The byte-for-byte comparison with the prompt Pi 1.6.0 sends lives in
//! `tests/context.rs` (Pi driven against the loopback mock) and `server/core/tests/prompt.rs`
//! (a fixture captured from Pi 1.6.0).

use std::path::{Path, PathBuf};

use crate::agent::Tool;
use crate::resources::{ContextFile, Resources};
use crate::skills::{format_skills_for_prompt, Skill};

/// A tool as the system prompt shows it: Pi's `promptSnippet` and `promptGuidelines`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolPrompt {
    pub name: String,
    /// One line for the `tools` section; `None` leaves the tool out of the list.
    pub snippet: Option<String>,
    /// Lines added to the `rules` section.
    pub guidelines: Vec<String>,
}

impl ToolPrompt {
    /// The prompt view of `tool`: its own snippet and guidelines.
    pub fn of(tool: &dyn Tool) -> ToolPrompt {
        ToolPrompt {
            name: tool.name().into_owned(),
            snippet: tool.prompt_snippet(),
            guidelines: tool.prompt_guidelines(),
        }
    }
}

/// Where Pi's own documentation is (Pi's `getReadmePath` / `getDocsPath` /
/// `getExamplesPath`), for the `docs` section that points at it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PiDocs {
    pub readme: PathBuf,
    pub docs: PathBuf,
    pub examples: PathBuf,
}

impl PiDocs {
    /// The documentation of the Pi package in `dir` (`README.md`, `docs`, `examples`).
    pub fn in_package(dir: &Path) -> PiDocs {
        PiDocs {
            readme: dir.join("README.md"),
            docs: dir.join("docs"),
            examples: dir.join("examples"),
        }
    }

    /// Pi's own override of its package folder, `PI_PACKAGE_DIR` (`config.js` `getPackageDir`),
    /// when set and not empty: pi-lsp does not ship Pi's documentation, so without it the
    /// `docs` section is left out.
    pub fn from_env() -> Option<PiDocs> {
        let dir = std::env::var_os("PI_PACKAGE_DIR").filter(|d| !d.is_empty())?;
        Some(PiDocs::in_package(Path::new(&dir)))
    }
}

/// Everything the system prompt is built from.
#[derive(Debug, Clone)]
pub struct SystemPromptOptions<'a> {
    /// The working directory (backslashes become `/`).
    pub cwd: &'a Path,
    /// The active tools, in order.
    pub tools: &'a [ToolPrompt],
    /// Guidelines added after the tools' own (Pi's `promptGuidelines`, e.g. the editor's).
    pub extra_guidelines: &'a [String],
    /// `SYSTEM.md` / `--system-prompt`: replaces the preamble, tools, rules and docs.
    pub custom_prompt: Option<&'a str>,
    /// `APPEND_SYSTEM.md` / `--append-system-prompt`.
    pub append: Option<&'a str>,
    /// Context files, global first, then root → cwd.
    pub context_files: &'a [ContextFile],
    /// Skills (listed when `read` or `bash` is among the tools).
    pub skills: &'a [Skill],
    /// Pi's documentation section; `None` leaves it out.
    pub pi_docs: Option<&'a PiDocs>,
}

/// The prompt's sections in order, `(name, text)`: the first is `preamble`, unframed; every
/// other is framed as `<name>\n…\n</name>` (Pi 1.6's `buildSystemPromptSections`).
pub type PromptSections = Vec<(String, String)>;

/// Pi 1.6's `buildSystemPromptSections`.
pub fn build_system_prompt_sections(o: &SystemPromptOptions<'_>) -> PromptSections {
    let names: Vec<&str> = o.tools.iter().map(|t| t.name.as_str()).collect();
    let has = |n: &str| names.contains(&n);
    let mut raw: Vec<(&str, String)> = Vec::new();
    match o.custom_prompt.filter(|c| !c.is_empty()) {
        Some(custom) => raw.push(("preamble", custom.to_string())),
        None => {
            raw.push(("preamble", "You are a coding assistant running inside pi, a coding agent harness. Help users inspect files, run commands, and modify code.".to_string()));
            raw.push(("tools", tools_text(o.tools)));
            raw.push(("rules", rules_text(o, &has)));
            if let Some(d) = o.pi_docs {
                raw.push(("docs", docs_text(d)));
            }
        }
    }
    if let Some(a) = o.append.filter(|a| !a.is_empty()) {
        raw.push(("addendum", a.to_string()));
    }
    if !o.context_files.is_empty() {
        let mut parts = vec!["Project-specific instructions and guidelines:".to_string()];
        parts.extend(o.context_files.iter().map(|f| {
            format!(
                "<project_instructions path=\"{}\">\n{}\n</project_instructions>",
                f.path.display(),
                f.content
            )
        }));
        raw.push(("project_context", parts.join("\n\n")));
    }
    // Pi: the skill hint names the first of read / bash that is active.
    if let Some(reader) = ["read", "bash"].into_iter().find(|r| has(r)) {
        let skills = format_skills_for_prompt(o.skills, reader);
        let skills = skills.trim();
        if !skills.is_empty() {
            raw.push(("skills", skills.to_string()));
        }
    }
    raw.push(("cwd", o.cwd.to_string_lossy().replace('\\', "/")));
    raw.into_iter()
        .map(|(name, text)| {
            let text = if name == "preamble" {
                text
            } else {
                format!("<{name}>\n{text}\n</{name}>")
            };
            (name.to_string(), text)
        })
        .collect()
}

/// The prompt a request sends for `sections` (pi-ai's `getSystemMessageText` of a system
/// message with empty `content`): the non-empty texts joined by blank lines.
pub fn render_sections(sections: &[(String, String)]) -> String {
    sections
        .iter()
        .map(|(_, t)| t.as_str())
        .filter(|t| !t.is_empty())
        .collect::<Vec<_>>()
        .join("\n\n")
}

/// Pi 1.6's `buildSystemPrompt`: [`build_system_prompt_sections`] rendered.
pub fn build_system_prompt(o: &SystemPromptOptions<'_>) -> String {
    render_sections(&build_system_prompt_sections(o))
}

fn tools_text(tools: &[ToolPrompt]) -> String {
    let listed: Vec<String> = tools
        .iter()
        .filter_map(|t| {
            let s = t.snippet.as_deref()?;
            // Pi's `_normalizePromptSnippet`: one line, runs of whitespace collapsed.
            let one = s.split_whitespace().collect::<Vec<_>>().join(" ");
            (!one.is_empty()).then(|| format!("- {}: {one}", t.name))
        })
        .collect();
    let list = if listed.is_empty() {
        "(none)".to_string()
    } else {
        listed.join("\n")
    };
    format!("{list}\n\nAdditional tools may be available.")
}

/// Pi 1.6's `buildRules`.
fn rules_text(o: &SystemPromptOptions<'_>, has: &dyn Fn(&str) -> bool) -> String {
    let mut rules: Vec<String> = Vec::new();
    let mut add = |g: &str| {
        let g = g.trim();
        if !g.is_empty() && !rules.iter().any(|x| x == g) {
            rules.push(g.to_string());
        }
    };
    // Bash is named for file operations only when no grep/find/ls tool is there; bash's own
    // guideline ([`crate::tools::BASH_GUIDELINE`]) comes with its tool.
    let exploring = has("grep") || has("find") || has("ls");
    if (has("bash") || has("powershell")) && !exploring {
        if has("bash") && has("powershell") {
            add("Use bash or PowerShell for file operations like listing, searching, and finding files");
        } else if has("powershell") {
            add("Use PowerShell for file operations like listing, searching, and finding files");
        } else {
            add("Use bash for file operations like ls, rg, find");
        }
    }
    for t in o.tools {
        for g in &t.guidelines {
            add(g);
        }
    }
    for g in o.extra_guidelines {
        add(g);
    }
    add("Be concise in your responses");
    add("Show file paths clearly when working with files");
    rules
        .iter()
        .map(|g| format!("- {g}"))
        .collect::<Vec<_>>()
        .join("\n")
}

fn docs_text(d: &PiDocs) -> String {
    format!(
        "Pi documentation (read only when the user asks about the harness itself, its SDK, extensions, themes, skills, or TUI):
- Main documentation: {}
- Additional docs: {}
- Examples: {} (extensions, custom tools, SDK)
- When reading pi docs or examples, resolve docs/... under Additional docs and examples/... under Examples, not the current working directory
- When asked about: extensions (docs/extensions.md, examples/extensions/), themes (docs/themes.md), skills (docs/skills.md), prompt templates (docs/prompt-templates.md), TUI components (docs/tui.md), keybindings (docs/keybindings.md), SDK integrations (docs/sdk.md), custom providers (docs/custom-provider.md), adding models (docs/models.md), packages (docs/packages.md), environment variables (docs/environment-variables.md), MCP servers (docs/mcp.md), codemode scripts and non-LLM models such as classifiers and image models (docs/codemode.md)
- Before implementing harness changes, read the relevant docs and examples in full, following related cross-references.",
        d.readme.display(),
        d.docs.display(),
        d.examples.display()
    )
}

/// The system prompt's sections for a run in `cwd` with `tools`, from `resources` (context
/// files, `SYSTEM.md`, `APPEND_SYSTEM.md`, skills) and `extra_guidelines`; the `docs` section
/// only with `PI_PACKAGE_DIR` ([`PiDocs::from_env`]). [`render_sections`] gives the prompt.
pub fn system_prompt_sections(
    cwd: &Path,
    tools: &[std::sync::Arc<dyn Tool>],
    resources: &Resources,
    extra_guidelines: &[String],
) -> PromptSections {
    let tools: Vec<ToolPrompt> = tools.iter().map(|t| ToolPrompt::of(t.as_ref())).collect();
    let docs = PiDocs::from_env();
    build_system_prompt_sections(&SystemPromptOptions {
        cwd,
        tools: &tools,
        extra_guidelines,
        custom_prompt: resources.system_prompt.as_deref(),
        append: resources.append_system_prompt.as_deref(),
        context_files: &resources.context_files,
        skills: &resources.skills,
        pi_docs: docs.as_ref(),
    })
}

/// The system prompt for a run ([`system_prompt_sections`] rendered).
pub fn system_prompt(
    cwd: &Path,
    tools: &[std::sync::Arc<dyn Tool>],
    resources: &Resources,
    extra_guidelines: &[String],
) -> String {
    render_sections(&system_prompt_sections(
        cwd,
        tools,
        resources,
        extra_guidelines,
    ))
}

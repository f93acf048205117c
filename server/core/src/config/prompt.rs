//! The system prompt, assembled as Pi 0.73.1's `buildSystemPrompt` (`core/system-prompt.js`):
//!
//! 1. the default text (or `SYSTEM.md` instead of it, which also drops the tool list and
//!    guidelines): identity, "Available tools" (each tool with a one-line snippet; a tool
//!    without one is not listed), the guidelines (Pi 1.6's bash rule — "Use bash for file
//!    operations…" only without grep/find/ls —, each tool's guidelines (bash's Pi 1.6 `PI_*`
//!    line among them), extra guidelines, then "Be concise…" and "Show file
//!    paths…", duplicates dropped) and, only when [`PiDocs`] is given, the block pointing at
//!    Pi's own documentation (pi-lsp does not ship Pi's docs, so it passes none);
//! 2. `APPEND_SYSTEM.md`;
//! 3. "# Project Context" with every context file (global, then root → workspace);
//! 4. the skills block, when the `read` tool is present;
//! 5. the current date (local) and working directory.
//!
//! The byte-for-byte comparison with the prompt Pi sends lives in `tests/context.rs` (Pi driven
//! against the loopback mock) and `server/core/tests/prompt.rs` (a fixture captured from Pi).

use std::path::{Path, PathBuf};

use crate::agent::Tool;
use crate::resources::{ContextFile, Resources};
use crate::skills::{format_skills_for_prompt, Skill};

/// A tool as the system prompt shows it: Pi's `promptSnippet` and `promptGuidelines`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolPrompt {
    pub name: String,
    /// One line for "Available tools"; `None` leaves the tool out of the list.
    pub snippet: Option<String>,
    /// Lines added to "Guidelines".
    pub guidelines: Vec<String>,
}

impl ToolPrompt {
    /// The prompt view of `tool`: its own snippet and guidelines.
    pub fn of(tool: &dyn Tool) -> ToolPrompt {
        ToolPrompt {
            name: tool.spec().name,
            snippet: tool.prompt_snippet(),
            guidelines: tool.prompt_guidelines(),
        }
    }
}

/// Where Pi's own documentation is (Pi's `getReadmePath` / `getDocsPath` /
/// `getExamplesPath`), for the prompt block that points at it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PiDocs {
    pub readme: PathBuf,
    pub docs: PathBuf,
    pub examples: PathBuf,
}

/// Everything the system prompt is built from.
#[derive(Debug, Clone)]
pub struct SystemPromptOptions<'a> {
    /// The working directory (backslashes become `/`).
    pub cwd: &'a Path,
    /// The active tools, in order.
    pub tools: &'a [ToolPrompt],
    /// Guidelines added after the tools' own (e.g. the editor's).
    pub extra_guidelines: &'a [String],
    /// `SYSTEM.md`: replaces the default text.
    pub custom_prompt: Option<&'a str>,
    /// `APPEND_SYSTEM.md`.
    pub append: Option<&'a str>,
    /// Context files, global first, then root → cwd.
    pub context_files: &'a [ContextFile],
    /// Skills (listed when `read` is among the tools).
    pub skills: &'a [Skill],
    /// Pi's documentation block; `None` leaves it out.
    pub pi_docs: Option<&'a PiDocs>,
    /// `YYYY-MM-DD`; `None` = today, local time (as Pi).
    pub date: Option<&'a str>,
}

/// Pi's `buildSystemPrompt`.
pub fn build_system_prompt(o: &SystemPromptOptions<'_>) -> String {
    let cwd = o.cwd.to_string_lossy().replace('\\', "/");
    let date = o
        .date
        .map(str::to_string)
        .unwrap_or_else(|| chrono::Local::now().format("%Y-%m-%d").to_string());
    let append = o.append.filter(|a| !a.is_empty());
    let names: Vec<&str> = o.tools.iter().map(|t| t.name.as_str()).collect();
    let has = |n: &str| names.contains(&n);

    let mut prompt = match o.custom_prompt.filter(|c| !c.is_empty()) {
        Some(custom) => custom.to_string(),
        None => default_text(o, &has),
    };
    if let Some(a) = append {
        prompt.push_str("\n\n");
        prompt.push_str(a);
    }
    if !o.context_files.is_empty() {
        prompt.push_str("\n\n# Project Context\n\n");
        prompt.push_str("Project-specific instructions and guidelines:\n\n");
        for f in o.context_files {
            prompt.push_str(&format!("## {}\n\n{}\n\n", f.path.display(), f.content));
        }
    }
    if has("read") && !o.skills.is_empty() {
        prompt.push_str(&format_skills_for_prompt(o.skills));
    }
    prompt.push_str(&format!("\nCurrent date: {date}"));
    prompt.push_str(&format!("\nCurrent working directory: {cwd}"));
    prompt
}

fn default_text(o: &SystemPromptOptions<'_>, has: &dyn Fn(&str) -> bool) -> String {
    let listed: Vec<String> = o
        .tools
        .iter()
        .filter_map(|t| {
            let s = t.snippet.as_deref()?;
            // Pi's `_normalizePromptSnippet`: one line, runs of whitespace collapsed.
            let one = s.split_whitespace().collect::<Vec<_>>().join(" ");
            (!one.is_empty()).then(|| format!("- {}: {one}", t.name))
        })
        .collect();
    let tools_list = if listed.is_empty() {
        "(none)".to_string()
    } else {
        listed.join("\n")
    };
    let mut guidelines: Vec<String> = Vec::new();
    let mut add = |g: &str| {
        let g = g.trim();
        if !g.is_empty() && !guidelines.iter().any(|x| x == g) {
            guidelines.push(g.to_string());
        }
    };
    // Pi 1.6's `buildRules`: bash is named for file operations only when no grep/find/ls
    // tool is there (0.73.1 also told the model to prefer those tools over bash; 1.6 does
    // not); bash's own guideline ([`crate::tools::BASH_GUIDELINE`]) comes with its tool.
    let exploring = has("grep") || has("find") || has("ls");
    if has("bash") && !exploring {
        add("Use bash for file operations like ls, rg, find");
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
    let guidelines = guidelines
        .iter()
        .map(|g| format!("- {g}"))
        .collect::<Vec<_>>()
        .join("\n");
    let mut s = format!(
        "You are an expert coding assistant operating inside pi, a coding agent harness. You help users by reading files, executing commands, editing code, and writing new files.

Available tools:
{tools_list}

In addition to the tools above, you may have access to other custom tools depending on the project.

Guidelines:
{guidelines}"
    );
    if let Some(d) = o.pi_docs {
        s.push_str(&format!(
            "

Pi documentation (read only when the user asks about pi itself, its SDK, extensions, themes, skills, or TUI):
- Main documentation: {}
- Additional docs: {}
- Examples: {} (extensions, custom tools, SDK)
- When asked about: extensions (docs/extensions.md, examples/extensions/), themes (docs/themes.md), skills (docs/skills.md), prompt templates (docs/prompt-templates.md), TUI components (docs/tui.md), keybindings (docs/keybindings.md), SDK integrations (docs/sdk.md), custom providers (docs/custom-provider.md), adding models (docs/models.md), pi packages (docs/packages.md)
- When working on pi topics, read the docs and examples, and follow .md cross-references before implementing
- Always read pi .md files completely and follow links to related docs (e.g., tui.md for TUI API details)",
            d.readme.display(),
            d.docs.display(),
            d.examples.display()
        ));
    }
    s
}

/// The system prompt for a run in `cwd` with `tools`, from `resources` (context files,
/// `SYSTEM.md`, `APPEND_SYSTEM.md`, skills) and `extra_guidelines`; no Pi docs block, today's
/// date.
pub fn system_prompt(
    cwd: &Path,
    tools: &[std::sync::Arc<dyn Tool>],
    resources: &Resources,
    extra_guidelines: &[String],
) -> String {
    let tools: Vec<ToolPrompt> = tools.iter().map(|t| ToolPrompt::of(t.as_ref())).collect();
    build_system_prompt(&SystemPromptOptions {
        cwd,
        tools: &tools,
        extra_guidelines,
        custom_prompt: resources.system_prompt.as_deref(),
        append: resources.append_system_prompt.as_deref(),
        context_files: &resources.context_files,
        skills: &resources.skills,
        pi_docs: None,
        date: None,
    })
}

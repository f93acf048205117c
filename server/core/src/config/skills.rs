//! Skills (Pi `docs/skills.md`, `core/skills.js`; the Agent Skills standard): a folder with a
//! `SKILL.md` whose frontmatter gives `name` and `description`. The system prompt lists the
//! skills (name, description, location) so the model can `read` one when a task matches;
//! `/skill:name args` puts the whole skill into the prompt.
//!
//! Discovery, in Pi's precedence order (the first skill of a name wins; the same file reached
//! twice, e.g. through a symlink, counts once): the project's `skills` settings entries,
//! `<workspace>/.pi/skills/` and `.agents/skills/` in the workspace and its ancestors up to the
//! git root (trusted workspaces only), then the global settings entries,
//! `<agent dir>/skills/` and `~/.agents/skills/`. In a folder, a `SKILL.md` makes it a skill
//! (no deeper search); otherwise subfolders are searched, and in `.pi/skills/`,
//! `<agent dir>/skills/` and folders named in settings the root's own `.md` files are skills
//! too. Dot entries and `node_modules` are skipped. `.gitignore` files inside skill folders are
//! not applied (Pi applies them).
//!
//! Validation as Pi: a missing `description` skips the skill; a name that breaks the standard
//! (1–64 of `a-z0-9-`, no leading, trailing or double hyphen, equal to its folder's name) only
//! warns.

use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::config::frontmatter::{parse_frontmatter, Scope};

/// One skill.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Skill {
    /// Frontmatter `name`, else the folder's name.
    pub name: String,
    /// Frontmatter `description` (required).
    pub description: String,
    /// The skill's Markdown file (usually `…/<name>/SKILL.md`).
    pub file_path: PathBuf,
    /// The folder relative references resolve against (the file's parent).
    pub base_dir: PathBuf,
    /// Whose it is.
    pub scope: Scope,
    /// Frontmatter `disable-model-invocation: true`: left out of the system prompt, invocable
    /// only as `/skill:name`.
    pub disable_model_invocation: bool,
}

/// Reads one skill file. `Ok(None)` when it has no description (skipped, as in Pi); the
/// strings are warnings about the file.
pub fn load_skill(path: &Path, scope: Scope) -> (Option<Skill>, Vec<String>) {
    let mut warnings = Vec::new();
    let raw = match std::fs::read_to_string(path) {
        Ok(r) => r,
        Err(e) => return (None, vec![format!("{}: {e}", path.display())]),
    };
    let (fm, _) = parse_frontmatter(&raw);
    let base_dir = path.parent().unwrap_or(Path::new("/")).to_path_buf();
    let parent_name = base_dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let description = fm
        .get("description")
        .and_then(|v| v.as_str())
        .unwrap_or_default()
        .to_string();
    if description.trim().is_empty() {
        warnings.push(format!("{}: description is required", path.display()));
    } else if description.encode_utf16().count() > 1024 {
        warnings.push(format!(
            "{}: description exceeds 1024 characters ({})",
            path.display(),
            description.encode_utf16().count()
        ));
    }
    let name = fm
        .get("name")
        .and_then(|v| v.as_str())
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .unwrap_or_else(|| parent_name.clone());
    for problem in name_problems(&name, &parent_name) {
        warnings.push(format!("{}: {problem}", path.display()));
    }
    if description.trim().is_empty() {
        return (None, warnings);
    }
    let skill = Skill {
        name,
        description,
        file_path: path.to_path_buf(),
        base_dir,
        scope,
        disable_model_invocation: fm.get("disable-model-invocation")
            == Some(&serde_json::Value::Bool(true)),
    };
    (Some(skill), warnings)
}

/// Pi's `validateName` messages.
fn name_problems(name: &str, parent: &str) -> Vec<String> {
    let mut v = Vec::new();
    if name != parent {
        v.push(format!(
            "name \"{name}\" does not match parent directory \"{parent}\""
        ));
    }
    if name.encode_utf16().count() > 64 {
        v.push(format!(
            "name exceeds 64 characters ({})",
            name.encode_utf16().count()
        ));
    }
    if name.is_empty()
        || !name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
    {
        v.push(
            "name contains invalid characters (must be lowercase a-z, 0-9, hyphens only)".into(),
        );
    }
    if name.starts_with('-') || name.ends_with('-') {
        v.push("name must not start or end with a hyphen".into());
    }
    if name.contains("--") {
        v.push("name must not contain consecutive hyphens".into());
    }
    v
}

/// How a folder is searched: `Pi` also takes the root's own `.md` files; `Agents`
/// (`.agents/skills`) only `SKILL.md` folders.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DirMode {
    Pi,
    Agents,
}

/// The entries of `dir` in the order the OS lists them (as Pi's `readdirSync`), symlinks
/// followed; `None` when it cannot be read.
fn entries(dir: &Path) -> Option<Vec<(String, PathBuf, bool, bool)>> {
    let rd = std::fs::read_dir(dir).ok()?;
    let mut out = Vec::new();
    for e in rd.flatten() {
        let path = e.path();
        let name = e.file_name().to_string_lossy().into_owned();
        // `metadata` follows symlinks; a broken link is skipped.
        let Ok(m) = std::fs::metadata(&path) else {
            continue;
        };
        out.push((name, path, m.is_dir(), m.is_file()));
    }
    Some(out)
}

/// The skill files under `dir` (Pi's `collectSkillEntries`).
pub fn collect_skill_files(dir: &Path, mode: DirMode) -> Vec<PathBuf> {
    collect_inner(dir, mode, true)
}

fn collect_inner(dir: &Path, mode: DirMode, root: bool) -> Vec<PathBuf> {
    let Some(list) = entries(dir) else {
        return Vec::new();
    };
    if let Some((_, p, _, _)) = list.iter().find(|(n, _, _, f)| n == "SKILL.md" && *f) {
        return vec![p.clone()];
    }
    let mut out = Vec::new();
    for (name, path, is_dir, is_file) in list {
        if name.starts_with('.') || name == "node_modules" {
            continue;
        }
        if mode == DirMode::Pi && root && is_file && name.ends_with(".md") {
            out.push(path);
            continue;
        }
        if is_dir {
            out.extend(collect_inner(&path, mode, false));
        }
    }
    out
}

/// `.agents/skills` of `start` and each ancestor up to the git root (the first folder with a
/// `.git`), or up to `/` outside a repository (Pi's `collectAncestorAgentsSkillDirs`).
pub fn ancestor_agents_skill_dirs(start: &Path) -> Vec<PathBuf> {
    let git_root = start.ancestors().find(|d| d.join(".git").exists());
    let mut out = Vec::new();
    for d in start.ancestors() {
        out.push(d.join(".agents").join("skills"));
        if Some(d) == git_root {
            break;
        }
    }
    out
}

/// Pi 1.6's `formatSkillsForPrompt`: the `<available_skills>` block of the system prompt (empty
/// when every skill has `disable-model-invocation`); its hint names `read_tool` (`"read"`,
/// `"bash"`, any other: no tool).
pub fn format_skills_for_prompt(skills: &[Skill], read_tool: &str) -> String {
    let visible: Vec<&Skill> = skills
        .iter()
        .filter(|s| !s.disable_model_invocation)
        .collect();
    if visible.is_empty() {
        return String::new();
    }
    let mut lines = vec![
        "\n\nThe following skills provide specialized instructions for specific tasks.".to_string(),
        match read_tool {
            "read" => "Use the read tool to load a skill's file when the task matches its description.",
            "bash" => "Use bash to load a skill's file when the task matches its description.",
            _ => "Load a skill's file when the task matches its description.",
        }
        .to_string(),
        "Resolve relative paths against the skill's directory (parent of SKILL.md). Use absolute paths in tool calls.".to_string(),
        String::new(),
        "<available_skills>".to_string(),
    ];
    for s in visible {
        lines.push("  <skill>".into());
        lines.push(format!("    <name>{}</name>", escape_xml(&s.name)));
        lines.push(format!(
            "    <description>{}</description>",
            escape_xml(&s.description)
        ));
        lines.push(format!(
            "    <location>{}</location>",
            escape_xml(&s.file_path.to_string_lossy())
        ));
        lines.push("  </skill>".into());
    }
    lines.push("</available_skills>".into());
    lines.join("\n")
}

fn escape_xml(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
        .replace('\'', "&apos;")
}

/// Pi's `_expandSkillCommand`: `/skill:name args` with a known `name` becomes
/// `<skill name="…" location="…">\nReferences are relative to <dir>.\n\n<body>\n</skill>`,
/// followed by `\n\n<args>` when there are arguments. `None` for other text or an unknown
/// skill; `Err` when the skill file cannot be read any more.
pub fn expand_skill_command(text: &str, skills: &[Skill]) -> Option<Result<String, String>> {
    let rest = text.strip_prefix("/skill:")?;
    let (name, args) = match rest.find(' ') {
        Some(i) => (&rest[..i], rest[i + 1..].trim()),
        None => (rest, ""),
    };
    let skill = skills.iter().find(|s| s.name == name)?;
    Some(match std::fs::read_to_string(&skill.file_path) {
        Ok(raw) => {
            let (_, body) = parse_frontmatter(&raw);
            let block = format!(
                "<skill name=\"{}\" location=\"{}\">\nReferences are relative to {}.\n\n{}\n</skill>",
                skill.name,
                skill.file_path.display(),
                skill.base_dir.display(),
                body.trim()
            );
            Ok(if args.is_empty() {
                block
            } else {
                format!("{block}\n\n{args}")
            })
        }
        Err(e) => Err(format!(
            "skill {}: cannot read {}: {e}",
            skill.name,
            skill.file_path.display()
        )),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn name_rules_match_pi() {
        assert!(name_problems("pdf-tools", "pdf-tools").is_empty());
        assert_eq!(
            name_problems("-Bad--", "x"),
            vec![
                "name \"-Bad--\" does not match parent directory \"x\"".to_string(),
                "name contains invalid characters (must be lowercase a-z, 0-9, hyphens only)"
                    .into(),
                "name must not start or end with a hyphen".into(),
                "name must not contain consecutive hyphens".into(),
            ]
        );
    }

    #[test]
    fn prompt_block_escapes_and_hides() {
        let s = |name: &str, hidden| Skill {
            name: name.into(),
            description: "Use <this> & \"that\"".into(),
            file_path: PathBuf::from(format!("/s/{name}/SKILL.md")),
            base_dir: PathBuf::from(format!("/s/{name}")),
            scope: Scope::User,
            disable_model_invocation: hidden,
        };
        assert_eq!(format_skills_for_prompt(&[s("a", true)], "read"), "");
        assert_eq!(
            format_skills_for_prompt(&[s("a", false), s("b", true)], "bash"),
            "\n\nThe following skills provide specialized instructions for specific tasks.\n\
Use bash to load a skill's file when the task matches its description.\n\
Resolve relative paths against the skill's directory (parent of SKILL.md). Use absolute paths in tool calls.\n\
\n<available_skills>\n  <skill>\n    <name>a</name>\n    <description>Use &lt;this&gt; &amp; &quot;that&quot;</description>\n    <location>/s/a/SKILL.md</location>\n  </skill>\n</available_skills>"
        );
    }
}

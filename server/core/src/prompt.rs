//! The system prompt: Pi's coding-agent prompt adapted to an editor, the tool list, project
//! instructions from `AGENTS.md` / `CLAUDE.md` at the workspace root (re-read for every run),
//! the date and the working directory.

use std::path::Path;

use pi_ai::ToolSpec;

/// Builds the system prompt for a run in `workspace` with `tools`.
pub fn system_prompt(workspace: &Path, tools: &[ToolSpec]) -> String {
    let mut s = String::from(
        "You are an expert coding assistant operating inside pi-lsp, a coding agent harness running in the user's editor. \
You help users by reading files, executing commands, editing code, and writing new files. \
Your file edits are applied through the editor, where the user reviews and can undo them.\n\nAvailable tools:\n",
    );
    for t in tools {
        let short = t.description.split(". ").next().unwrap_or(&t.description);
        s.push_str(&format!("- {}: {}\n", t.name, short.trim_end_matches('.')));
    }
    s.push_str(
        "\nGuidelines:\n\
- Use read to examine files instead of cat or sed; it shows unsaved editor changes.\n\
- Use edit for precise changes (edits[].oldText must match exactly and be unique).\n\
- When changing multiple separate locations in one file, use one edit call with multiple entries in edits[].\n\
- Use write only for new files or complete rewrites.\n\
- Be concise in your responses.\n\
- Show file paths clearly when working with files.\n",
    );
    for name in ["AGENTS.md", "CLAUDE.md"] {
        let p = workspace.join(name);
        if let Ok(text) = std::fs::read_to_string(&p) {
            s.push_str(&format!(
                "\n# Project Context\n\nProject-specific instructions and guidelines:\n\n## {}\n\n{}\n",
                p.display(),
                text.trim_end()
            ));
            break;
        }
    }
    s.push_str(&format!(
        "\nCurrent date: {}\nCurrent working directory: {}",
        chrono::Utc::now().format("%Y-%m-%d"),
        workspace.display()
    ));
    s
}

//! The system prompt, prompt templates and skills of a real workspace on disk, against a
//! prompt captured from Pi 1.6.0 (`fixtures/prompt/pi-1.6.0-system-prompt.txt`, written by
//! `tests/context.rs` with `PI_PROMPT_FIXTURE` set; `{ROOT}` and `{PI_PACKAGE}` stand for the
//! temporary folder and Pi's package folder).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

use std::sync::Arc;

use pi_core::approval::ToolKind;
use pi_core::fs::DiskFs;
use pi_core::prompt::{build_system_prompt, PiDocs, SystemPromptOptions, ToolPrompt};
use pi_core::resources::{Scope, WorkspaceConfig};
use pi_core::tools::default_tools;

mod common;
use common::tmp_dir;

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

/// The same layout as `prompt_fixture` in `tests/context.rs`, plus templates.
fn layout(root: &Path) -> (PathBuf, PathBuf) {
    let ws = root.join("ws");
    let agent = root.join("agent");
    std::fs::create_dir_all(root.join("home")).unwrap();
    write(&agent.join("AGENTS.md"), "Global rules.\n");
    write(&root.join("CLAUDE.md"), "Ancestor rules.");
    write(
        &ws.join("AGENTS.md"),
        "# Workspace\n\nUse tabs & <angle> brackets.\n",
    );
    write(&ws.join(".pi/APPEND_SYSTEM.md"), "Appended text.\n");
    write(
        &agent.join("skills/global-skill/SKILL.md"),
        "---\nname: global-skill\ndescription: \"Global: <b> & 'q'\"\n---\nBody.\n",
    );
    write(
        &agent.join("skills/hidden/SKILL.md"),
        "---\nname: hidden\ndescription: Hidden.\ndisable-model-invocation: true\n---\nBody.\n",
    );
    write(
        &ws.join(".pi/skills/proj-skill/SKILL.md"),
        "---\nname: proj-skill\ndescription: Project skill.\n---\n\n# Project skill\n\nRun ./x.sh\n",
    );
    write(
        &ws.join(".agents/skills/agents-skill/SKILL.md"),
        "---\nname: agents-skill\ndescription: From .agents.\n---\nBody.\n",
    );
    // Templates: the project's `review` shadows the global one.
    write(
        &ws.join(".pi/prompts/review.md"),
        "---\ndescription: Review staged changes\nargument-hint: \"<focus>\"\n---\nReview $1, then ${@:2}.\n",
    );
    write(&agent.join("prompts/review.md"), "Global review.\n");
    write(
        &agent.join("prompts/long.md"),
        "\n\nA first line that is much longer than sixty characters, so it is cut short here.\n",
    );
    (ws, agent)
}

#[test]
fn workspace_prompt_matches_pi_and_templates_and_skills_expand() {
    let root = tmp_dir("pi-core-prompt-");
    let (ws, agent) = layout(&root);
    // `~/.agents/skills` is a global skill folder: point HOME at an empty one (the only test
    // in this binary, so no other thread reads the environment meanwhile).
    std::env::set_var("HOME", root.join("home"));

    let cfg = WorkspaceConfig::new(ws.clone(), Some(agent.clone()), true);
    let r = cfg.resources();
    // The built-in tools declare their own snippets, guidelines and approval kinds.
    let builtin = default_tools(Arc::new(DiskFs::new(ws.clone())), None);
    let mut tools: Vec<ToolPrompt> = builtin.iter().map(|t| ToolPrompt::of(t.as_ref())).collect();
    // A session's bash exports the `PI_*` variables and says so (Pi 1.6); these tools belong
    // to no session.
    assert_eq!(tools[1].guidelines, Vec::<String>::new());
    tools[1]
        .guidelines
        .push(pi_core::tools::BASH_GUIDELINE.to_string());
    assert_eq!(
        tools.iter().map(|t| t.name.as_str()).collect::<Vec<_>>(),
        ["read", "bash", "edit", "write", "grep", "find", "ls"]
    );
    assert_eq!(
        builtin
            .iter()
            .map(|t| t.approval_kind())
            .collect::<Vec<_>>(),
        [
            ToolKind::ReadOnly,
            ToolKind::Execute,
            ToolKind::Edit,
            ToolKind::Edit,
            ToolKind::ReadOnly,
            ToolKind::ReadOnly,
            ToolKind::ReadOnly
        ]
    );
    let package = PathBuf::from("{PI_PACKAGE}");
    let docs = PiDocs::in_package(&package);
    let prompt = build_system_prompt(&SystemPromptOptions {
        cwd: &ws,
        tools: &tools,
        extra_guidelines: &[],
        custom_prompt: r.system_prompt.as_deref(),
        append: r.append_system_prompt.as_deref(),
        context_files: &r.context_files,
        skills: &r.skills,
        pi_docs: Some(&docs),
    });
    let fixture = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../fixtures/prompt/pi-1.6.0-system-prompt.txt"),
    )
    .unwrap()
    .replace("{ROOT}", &root.display().to_string());
    assert_eq!(prompt, fixture);

    // Templates: one per name, project first; descriptions as Pi derives them.
    let listed: Vec<(&str, &str, Option<&str>, Scope)> = r
        .prompt_templates
        .iter()
        .map(|t| {
            (
                t.name.as_str(),
                t.description.as_str(),
                t.argument_hint.as_deref(),
                t.scope,
            )
        })
        .collect();
    assert_eq!(
        listed,
        vec![
            (
                "review",
                "Review staged changes",
                Some("<focus>"),
                Scope::Project
            ),
            (
                "long",
                "A first line that is much longer than sixty characters, so i...",
                None,
                Scope::User
            ),
        ]
    );
    assert_eq!(
        r.expand(r#"/review tests "the docs" README"#, true),
        "Review tests, then the docs README."
    );
    assert_eq!(r.expand("/nosuch x", true), "/nosuch x");
    assert_eq!(r.expand("review x", true), "review x");

    // Skills: hidden ones are listed here but not in the prompt; `/skill:` expands as Pi.
    let names: Vec<&str> = r.skills.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names.len(), 4);
    assert_eq!(names[..2], ["proj-skill", "agents-skill"]);
    let skill_dir = ws.join(".pi/skills/proj-skill");
    assert_eq!(
        r.expand("/skill:proj-skill  fix it ", true),
        format!(
            "<skill name=\"proj-skill\" location=\"{}\">\nReferences are relative to {}.\n\n# Project skill\n\nRun ./x.sh\n</skill>\n\nfix it",
            skill_dir.join("SKILL.md").display(),
            skill_dir.display()
        )
    );
    assert_eq!(r.expand("/skill:proj-skill", false), "/skill:proj-skill");

    // Untrusted: no project templates, skills, APPEND_SYSTEM.md; context files still load.
    let untrusted = WorkspaceConfig::new(ws.clone(), Some(agent.clone()), false);
    let u = untrusted.resources();
    assert_eq!(u.append_system_prompt, None);
    assert_eq!(u.context_files, r.context_files);
    let names: Vec<&str> = u.skills.iter().map(|s| s.name.as_str()).collect();
    assert!(
        !names.contains(&"proj-skill") && !names.contains(&"agents-skill"),
        "{names:?}"
    );
    // Without frontmatter Pi keeps the body untrimmed.
    assert_eq!(u.expand("/review a", true), "Global review.\n");
    assert_eq!(
        untrusted.ignored_project_files(),
        vec![
            ws.join(".pi/prompts"),
            ws.join(".pi/skills"),
            ws.join(".pi/APPEND_SYSTEM.md"),
            ws.join(".agents/skills"),
        ]
    );
    assert_eq!(untrusted.models_files(), vec![agent.join("models.json")]);
    assert_eq!(
        cfg.models_files(),
        vec![ws.join(".pi/models.json"), agent.join("models.json")]
    );
    std::fs::remove_dir_all(&root).unwrap();
}
